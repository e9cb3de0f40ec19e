// The plan as `--dry-run --json` (schema: ringrun(1), --json) and as the --verbose/--dry-run table.
#include <ringrun/plan.hpp>

#include <ringrun/environment_variables.hpp>
#include <ringrun/json.hpp>

#include <fmt/format.h>

#include <charconv>
#include <ostream>
#include <utility>

namespace ringrun {
namespace {

constexpr std::size_t kFlushBytes = 1 << 20;

// One rank's "env" object as fixed text with the identity values left open: `text` up to the
// next open value, then that value (`field`), or the end.
struct EnvPiece {
  std::string text;
  std::optional<IdentityField> field;
};
using EnvTemplate = std::vector<EnvPiece>;

// The JSON of every variable a rank of this (shared, slot) pair gets, sorted by name as the
// merged map would list them. The secret is per job and this job never starts; printing it would
// only teach people to paste it.
EnvTemplate env_template(const SharedEnvironment* shared, const EnvironmentMap* slot) {
  EnvironmentMap merged;  // value "" for identity names: filled per rank
  std::map<std::string, IdentityField, std::less<>> open;
  if (shared) merged = shared->defaults;
  for (const IdentityVariable& v : kIdentityVariablesByName) {
    merged[v.name];
    open[v.name] = v.field;
  }
  if (slot)
    for (const auto& [k, v] : *slot) {
      merged[k] = v;
      open.erase(k);
    }
  if (shared)
    for (const auto& [k, v] : shared->overrides) {
      merged[k] = v;
      open.erase(k);
    }
  EnvTemplate pieces(1);
  bool first = true;
  for (const auto& [k, v] : merged) {
    std::string& text = pieces.back().text;
    if (!first) text += ", ";
    first = false;
    json::append_string(text, k);
    text += ": ";
    if (auto it = open.find(k); it != open.end()) {
      pieces.back().field = it->second;
      pieces.emplace_back();
    } else {
      json::append_string(text, k == variables::kJobSecret.name ? "<redacted>" : v);
    }
  }
  return pieces;
}

void append_int(std::string& out, long long value) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, end);
}

void append_identity(std::string& out, const RankIdentity& id, IdentityField field) {
  if (field == IdentityField::hostname) {
    json::append_string(out, id.hostname);
    return;
  }
  out += '"';
  switch (field) {
    case IdentityField::rank: append_int(out, id.rank); break;
    case IdentityField::local_rank: append_int(out, id.local_rank); break;
    case IdentityField::local_size: append_int(out, id.local_size); break;
    case IdentityField::cross_rank: append_int(out, id.cross_rank); break;
    case IdentityField::cross_size: append_int(out, id.cross_size); break;
    case IdentityField::group_rank: append_int(out, static_cast<long long>(id.group_rank)); break;
    case IdentityField::hostname:
    case IdentityField::size:
    case IdentityField::nothing: break;  // hostname above; the others are not a rank's own
  }
  out += '"';
}

void append_optional(std::string& out, const std::optional<std::string>& value) {
  if (value) json::append_string(out, *value);
  else out += "null";
}

void append_rank(std::string& out, const RankSlot& r, const EnvTemplate& env) {
  out += "{\"rank\": ";
  append_int(out, r.rank);
  out += ", \"host\": ";
  json::append_string(out, r.host);
  out += ", \"local_rank\": ";
  append_int(out, r.local_rank);
  out += ", \"local_size\": ";
  append_int(out, r.local_size);
  out += ", \"cross_rank\": ";
  append_int(out, r.cross_rank);
  out += ", \"cross_size\": ";
  append_int(out, r.cross_size);
  out += ", \"gpu\": ";
  append_optional(out, r.gpu);
  out += ", \"cpus\": ";
  if (r.cpus.empty()) out += "null";
  else json::append_string(out, topology::format_cpulist(r.cpus));
  out += ", \"nic\": ";
  append_optional(out, r.nic);
  out += ", \"roce_gid_index\": ";
  if (r.roce_gid_index) append_int(out, *r.roce_gid_index);
  else out += "null";
  out += ", \"env\": {";
  for (const EnvPiece& piece : env) {
    out += piece.text;
    if (piece.field) append_identity(out, r.env.identity(), *piece.field);
  }
  out += "}}";
}

// The JSON in pieces: `flush(text)` gets each filled buffer and the rest at the end.
template <class Flush>
void render_plan_json(const Plan& plan, Flush&& flush) {
  std::string out = "{";
  out += fmt::format("\"launcher\": {}, \"command\": {}, \"world_size\": {}, \"start_timeout\": {}, \"ranks\": [",
                     json::quote(to_string(plan.launcher)), json::string_array(plan.command), plan.world_size,
                     plan.start_timeout_s);
  // Ranks share few (shared, slot) pairs: each pair's text is escaped once.
  std::map<std::pair<const SharedEnvironment*, const EnvironmentMap*>, EnvTemplate> templates;
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    const RankSlot& r = plan.ranks[i];
    const auto key = std::make_pair(r.env.shared(), r.env.slot());
    auto it = templates.find(key);
    if (it == templates.end()) it = templates.emplace(key, env_template(key.first, key.second)).first;
    out += i ? ",\n  " : "\n  ";
    append_rank(out, r, it->second);
    if (out.size() >= kFlushBytes) {
      flush(out);
      out.clear();
    }
  }
  out += "]}\n";
  flush(out);
}

}  // namespace

std::string plan_to_json(const Plan& plan) {
  std::string whole;
  render_plan_json(plan, [&whole](const std::string& part) { whole += part; });
  return whole;
}

void write_plan_json(const Plan& plan, std::ostream& out) {
  render_plan_json(plan, [&out](const std::string& part) { out.write(part.data(), static_cast<std::streamsize>(part.size())); });
  out.flush();
}

std::string plan_to_table(const Plan& plan) {
  std::string out = fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {:<10} {:>7} {}\n", "rank", "host", "local",
                                "cross", "gpu", "cpus", "nic", "gid_idx", "nccl");
  for (const RankSlot& r : plan.ranks) {
    std::vector<std::string> nccl;
    for (const auto& [k, v] : r.env.to_map())
      if (k.starts_with("NCCL_")) nccl.push_back(k + "=" + v);
    out += fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {:<10} {:>7} {}\n", r.rank, r.host, r.local_rank,
                       r.cross_rank, r.gpu.value_or("-"), r.cpus.empty() ? "-" : topology::format_cpulist(r.cpus),
                       r.nic.value_or("-"), r.roce_gid_index ? std::to_string(*r.roce_gid_index) : "-",
                       nccl.empty() ? "-" : fmt::format("{}", fmt::join(nccl, " ")));
  }
  return out;
}

}  // namespace ringrun
