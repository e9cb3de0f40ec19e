// An MPIJob's launcher pod (ringrun/kubernetes.hpp): the operator's hostfile and the variables
// that name it, for Open MPI 4 (orte_*), Open MPI 5 (prte_*), Intel MPI and MPICH.
#include <ringrun/kubernetes.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace ringrun {
namespace {

const std::string* value_of(const Environment& env, std::string_view name) {
  auto it = env.find(std::string(name));
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// The folder of `path` with its '/', or "" for a bare name.
std::string folder_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

std::optional<MpiJobContract> mpijob_contract(const Environment& env,
                                              const std::function<bool(const std::string&)>& readable) {
  // The operator sets the variable of the MPI the job names (Open MPI's orte_ one even where that
  // MPI is Open MPI 5, which reads only prte_); a user may set the others.
  static constexpr std::array<std::string_view, 4> kHostfileVariables = {
      "OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile", "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE"};
  MpiJobContract contract;
  for (std::string_view name : kHostfileVariables)
    if (const std::string* path = value_of(env, name); path && readable(*path)) {
      contract.hostfile = *path;
      contract.named_by = fmt::format("{}={}", name, *path);
      break;
    }
  if (contract.hostfile.empty()) {
    const std::string* role = value_of(env, "K_MPI_JOB_ROLE");
    if (!role || *role != "launcher") return std::nullopt;
    contract.hostfile = std::string(kMpiJobHostfile);
    contract.named_by = "K_MPI_JOB_ROLE=launcher";
  }
  for (std::string_view name : {std::string_view("OMPI_MCA_orte_set_default_slots"), std::string_view("I_MPI_PERHOST")})
    if (const std::string* text = value_of(env, name)) {
      auto slots = parse_slots(*text);
      if (!slots)
        throw InputError(fmt::format("{}='{}' : the slots of a hostfile line without any must be a positive number; "
                                     "set the MPIJob's slotsPerWorker",
                                     name, *text));
      contract.default_slots = *slots;
      break;
    }
  contract.discovery_script = folder_of(contract.hostfile) + "discover_hosts.sh";
  return contract;
}

Allocation parse_mpijob_hostfile(std::string_view text, const MpiJobContract& contract) {
  Allocation alloc = parse_hostfile(text, contract.hostfile, contract.default_slots);
  alloc.source = AllocationSource::mpijob;
  return alloc;
}

std::string describe_mpijob(const MpiJobContract& contract, const Allocation& hostfile) {
  int low = hostfile.hosts.empty() ? 0 : hostfile.hosts.front().slots, high = low;
  for (const HostSlots& h : hostfile.hosts) {
    low = std::min(low, h.slots);
    high = std::max(high, h.slots);
  }
  const std::string slots = low == high ? std::to_string(low) : fmt::format("{}-{}", low, high);
  return fmt::format("MPIJob hostfile {} ({}): {} host{} x {} slot{}", contract.hostfile, contract.named_by,
                     hostfile.hosts.size(), hostfile.hosts.size() == 1 ? "" : "s", slots, high == 1 ? "" : "s");
}

}  // namespace ringrun
