// The environment the plan sets for one rank, held as layers so that a 32,768-rank plan does not
// keep 32,768 copies of what every rank shares: the job's variables (one copy per plan), the
// slot's (one copy per distinct GPU/cpus/NIC slot) and the rank's numbers, rendered on demand.
#pragma once

#include <ringrun/environment_variables.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ringrun {

using EnvironmentMap = std::map<std::string, std::string, std::less<>>;

// What every rank of a plan gets alike. make_plan writes `defaults` before a slot's variables (a
// slot's value wins) and `overrides` after them (options that win over the slot, -x, PYTHONPATH).
// A name is in at most one of the two.
struct SharedEnvironment {
  EnvironmentMap defaults;
  EnvironmentMap overrides;
};

// The variables that name the rank itself (variables::is_rank_identity), each derived from one
// field of RankIdentity.
using IdentityField = variables::Carries;
struct IdentityVariable {
  const char* name = "";
  IdentityField field = IdentityField::nothing;
};
// Sorted by name, as the JSON lists them.
inline constexpr auto kIdentityVariablesByName = [] {
  std::array<IdentityVariable, variables::count_if(variables::is_rank_identity)> out{};
  std::size_t i = 0;
  for (const variables::Variable* v : variables::kAll)
    if (variables::is_rank_identity(*v)) out[i++] = {v->name, v->carries};
  std::sort(out.begin(), out.end(), [](const IdentityVariable& a, const IdentityVariable& b) {
    return std::string_view(a.name) < std::string_view(b.name);
  });
  return out;
}();

struct RankIdentity {
  int rank = 0, local_rank = 0, local_size = 0, cross_rank = 0, cross_size = 0;
  std::size_t group_rank = 0;  // the host's index among the plan's hosts
  std::string hostname;
};

class RankEnvironment {
 public:
  RankEnvironment() = default;
  RankEnvironment(RankIdentity identity, std::shared_ptr<const SharedEnvironment> shared,
                  std::shared_ptr<const EnvironmentMap> slot)
      : identity_(std::move(identity)), shared_(std::move(shared)), slot_(std::move(slot)) {}

  // The value the rank gets; precedence: overrides, slot, identity, defaults.
  std::optional<std::string> value_of(std::string_view name) const;
  bool contains(std::string_view name) const { return value_of(name).has_value(); }
  std::size_t count(std::string_view name) const { return contains(name) ? 1 : 0; }
  // Throws std::out_of_range for a name the plan does not set.
  std::string at(std::string_view name) const;
  // Every variable, merged (what the rank's process gets on top of the inherited environment).
  EnvironmentMap to_map() const;

  const RankIdentity& identity() const { return identity_; }
  const SharedEnvironment* shared() const { return shared_.get(); }
  const EnvironmentMap* slot() const { return slot_.get(); }

 private:
  RankIdentity identity_;
  std::shared_ptr<const SharedEnvironment> shared_;
  std::shared_ptr<const EnvironmentMap> slot_;
};

// The value of one identity field as the variable carries it.
std::string identity_value(const RankIdentity& identity, IdentityField field);

}  // namespace ringrun
