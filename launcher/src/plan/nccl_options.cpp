// The NCCL options' names and the user's NCCL_* variables against ringrun's options (ringrun(1),
// --nccl-algo, --nccl-proto, --tcp, --network-interface).
#include <ringrun/gpu_libraries.hpp>
#include <ringrun/nccl_options.hpp>

#include "plan/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>

namespace ringrun {
namespace {

// Would NCCL, given NCCL_SOCKET_IFNAME=`value`, use interface `name`? The value is a comma list of
// prefixes; a leading '^' makes it an exclude list, then a leading '=' makes the names exact.
bool socket_ifname_selects(std::string_view value, std::string_view name) {
  bool exclude = false;
  if (!value.empty() && value[0] == '^') {
    exclude = true;
    value.remove_prefix(1);
  }
  bool exact = false;
  if (!value.empty() && value[0] == '=') {
    exact = true;
    value.remove_prefix(1);
  }
  bool listed = false;
  for (const std::string& item : text::split_on(value, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : name.starts_with(item)) listed = true;
  }
  return exclude ? !listed : listed;
}

// The NCCL algorithm names the version accepts (nullopt: every name any version accepts).
std::vector<std::string> nccl_algorithms(std::optional<int> version) {
  auto at_least = [&](int major, int minor) { return !version || *version >= nccl_version_code(major, minor, 0); };
  std::vector<std::string> names = {"Ring", "Tree"};
  if (!version || *version < nccl_version_code(2, 14, 0)) names.push_back("Collnet");
  if (at_least(2, 14)) names.insert(names.end(), {"CollnetDirect", "CollnetChain"});
  if (at_least(2, 17)) names.push_back("NVLS");
  if (at_least(2, 18)) names.push_back("NVLSTree");
  if (at_least(2, 23)) names.push_back("PAT");
  return names;
}

const std::vector<std::string> kNcclProtocols = {"LL", "LL128", "Simple"};

// Checks each name of a comma list (after an optional '^') against `accepted`, case-insensitively.
void check_names(std::string_view option, std::string_view whole, std::string_view list,
                 const std::vector<std::string>& accepted, std::string_view accepted_by) {
  if (!list.empty() && list[0] == '^') list.remove_prefix(1);
  for (const std::string& name : text::split_on(list, ',')) {
    const std::string wanted = text::lower(name);
    bool known = std::any_of(accepted.begin(), accepted.end(), [&](const std::string& a) { return text::lower(a) == wanted; });
    if (!known)
      throw InputError(fmt::format("{} '{}' : '{}' is not a name {} accepts; use a comma list of {} (optionally "
                                   "after ^ to exclude)",
                                   option, whole, name, accepted_by, fmt::join(accepted, ", ")));
  }
}

std::string accepted_by(std::optional<int> version) {
  return version ? fmt::format("NCCL {}", format_nccl_version(*version)) : std::string("any NCCL version");
}

// -x NAME=VALUE wins over ringrun's own environment for what the ranks get.
std::optional<std::string> user_value(const std::map<std::string, std::string>& user_env, const Environment& launcher_env,
                                      const std::string& name) {
  if (auto it = user_env.find(name); it != user_env.end()) return it->second;
  if (auto it = launcher_env.find(name); it != launcher_env.end()) return it->second;
  return std::nullopt;
}

std::string user_source(const std::map<std::string, std::string>& user_env, const std::string& name) {
  return user_env.count(name) ? "by -x" : "in the environment";
}

}  // namespace

std::vector<std::string> nccl_contradictions(const NcclOptions& nccl, const std::optional<std::string>& network_interface,
                                             const std::map<std::string, std::string>& user_env,
                                             const Environment& launcher_env) {
  std::vector<std::string> warnings;
  auto value_of = [&](const std::string& name) { return user_value(user_env, launcher_env, name); };
  if (nccl.tcp) {
    if (auto v = value_of("NCCL_IB_DISABLE"); v && *v != "1")
      warnings.push_back(fmt::format("ringrun: warning: --tcp sets NCCL_IB_DISABLE=1 but NCCL_IB_DISABLE={} is set {}; "
                                     "the ranks keep {} (NCCL may still use InfiniBand); unset it or drop --tcp",
                                     *v, user_source(user_env, "NCCL_IB_DISABLE"), *v));
  }
  if (auto v = value_of("NCCL_SOCKET_IFNAME")) {
    if (network_interface && !socket_ifname_selects(*v, *network_interface))
      warnings.push_back(fmt::format("ringrun: warning: --network-interface {} but NCCL_SOCKET_IFNAME={} set {} does "
                                     "not select {}; NCCL follows NCCL_SOCKET_IFNAME; unset it or make it ={}",
                                     *network_interface, *v, user_source(user_env, "NCCL_SOCKET_IFNAME"),
                                     *network_interface, *network_interface));
    if (!v->empty() && (*v)[0] == '^' && socket_ifname_selects(*v, "lo"))
      warnings.push_back(fmt::format("ringrun: warning: NCCL_SOCKET_IFNAME={} set {} excludes some interfaces but not "
                                     "lo, so NCCL may pick lo; write NCCL_SOCKET_IFNAME={},lo or name one (=eth0)",
                                     *v, user_source(user_env, "NCCL_SOCKET_IFNAME"), *v));
  }
  auto compare = [&](const char* option, const std::optional<std::string>& given, const std::string& name) {
    if (!given) return;
    if (auto v = value_of(name); v && text::lower(*v) != text::lower(*given))
      warnings.push_back(fmt::format("ringrun: warning: {} {} but {}={} is set {}; the ranks keep {}; unset it or drop "
                                     "{}",
                                     option, *given, name, *v, user_source(user_env, name), *v, option));
  };
  compare("--nccl-algo", nccl.algo, "NCCL_ALGO");
  compare("--nccl-proto", nccl.proto, "NCCL_PROTO");
  if (nccl.ib_gid_index && *nccl.ib_gid_index != "auto")
    compare("--nccl-ib-gid-index", nccl.ib_gid_index, "NCCL_IB_GID_INDEX");
  return warnings;
}

std::string format_nccl_version(int code) { return gpu::version_text(gpu::Library::nccl, code); }

void validate_nccl_algo(const std::string& list, std::optional<int> nccl_version) {
  const std::vector<std::string> accepted = nccl_algorithms(nccl_version);
  if (list.empty())
    throw InputError(fmt::format("--nccl-algo '' : give a comma list of {}", fmt::join(accepted, ", ")));
  const bool per_function = list.find(';') != std::string::npos || list.find(':') != std::string::npos;
  if (per_function && nccl_version && *nccl_version < nccl_version_code(2, 24, 0))
    throw InputError(fmt::format("--nccl-algo '{}' : the per-function form (';', 'func:') needs NCCL 2.24 or newer, "
                                 "found {}; give one comma list",
                                 list, format_nccl_version(*nccl_version)));
  for (const std::string& part : text::split_on(list, ';')) {
    auto colon = part.find(':');
    check_names("--nccl-algo", list, colon == std::string::npos ? part : part.substr(colon + 1), accepted,
                accepted_by(nccl_version));
  }
}

void validate_nccl_proto(const std::string& list) {
  check_names("--nccl-proto", list, list, kNcclProtocols, "NCCL");
}

}  // namespace ringrun
