#include <ringrun/rank_environment.hpp>

#include <stdexcept>

namespace ringrun {

std::string identity_value(const RankIdentity& id, IdentityField field) {
  switch (field) {
    case IdentityField::rank: return std::to_string(id.rank);
    case IdentityField::local_rank: return std::to_string(id.local_rank);
    case IdentityField::local_size: return std::to_string(id.local_size);
    case IdentityField::cross_rank: return std::to_string(id.cross_rank);
    case IdentityField::cross_size: return std::to_string(id.cross_size);
    case IdentityField::group_rank: return std::to_string(id.group_rank);
    case IdentityField::hostname: return id.hostname;
    case IdentityField::size:
    case IdentityField::nothing: break;  // not a rank's own: never in kIdentityVariablesByName
  }
  return {};
}

std::optional<std::string> RankEnvironment::value_of(std::string_view name) const {
  if (shared_)
    if (auto it = shared_->overrides.find(name); it != shared_->overrides.end()) return it->second;
  if (slot_)
    if (auto it = slot_->find(name); it != slot_->end()) return it->second;
  for (const IdentityVariable& v : kIdentityVariablesByName)
    if (name == v.name) return identity_value(identity_, v.field);
  if (shared_)
    if (auto it = shared_->defaults.find(name); it != shared_->defaults.end()) return it->second;
  return std::nullopt;
}

std::string RankEnvironment::at(std::string_view name) const {
  if (auto value = value_of(name)) return *value;
  throw std::out_of_range("RankEnvironment::at: " + std::string(name) + " is not set by the plan");
}

EnvironmentMap RankEnvironment::to_map() const {
  EnvironmentMap env;
  // Lowest precedence first; each later layer replaces what it names.
  if (shared_) env = shared_->defaults;
  for (const IdentityVariable& v : kIdentityVariablesByName) env[v.name] = identity_value(identity_, v.field);
  if (slot_)
    for (const auto& [k, v] : *slot_) env[k] = v;
  if (shared_)
    for (const auto& [k, v] : shared_->overrides) env[k] = v;
  return env;
}

}  // namespace ringrun
