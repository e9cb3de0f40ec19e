// The srun and mpirun backends' common part (backend/cluster_backend.hpp).
#include "backend/cluster_backend.hpp"
#include "facts/python_package.hpp"

#include <ringrun/rank_environment.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ringrun {
namespace {

// Whether mpirun passes ringrun's own variable `name` on to every rank by name (-x), as horovodrun
// passes its environment (ringrun(1), DESCRIPTION): srun exports the environment itself and
// local ranks inherit it, but ranks mpirun starts over ssh get only what -x names. Not what each
// node has of its own (its GPUs, its SLURM step, its MPI library's and shell's variables).
bool forwarded_to_ranks(std::string_view name) {
  if (name.empty() || name == "_" || name.find_first_of("%=") != std::string_view::npos) return false;
  // K_MPI_JOB_ROLE: an MPIJob's launcher pod says "launcher", its workers "worker".
  for (std::string_view own : {"OLDPWD", "PWD", "HOSTNAME", "SHLVL", "K_MPI_JOB_ROLE"})
    if (name == own) return false;
  for (std::string_view prefix : {"BASH_FUNC_", "SLURM_", "OMPI_", "PMIX_", "PMI_", "ORTE_", "OPAL_", "PRTE_"})
    if (name.starts_with(prefix)) return false;
  return !name.ends_with("_VISIBLE_DEVICES") && name != "GPU_DEVICE_ORDINAL";
}

}  // namespace

// How many of the plan's ranks each of its hosts runs, in host order.
std::vector<int> ranks_per_host(const Plan& plan) {
  std::vector<int> counts(plan.hosts.size(), 0);
  for (const auto& r : plan.ranks)
    if (r.host_index < counts.size()) ++counts[r.host_index];
  return counts;
}

// What every task needs to plan itself: the layout, the store, the knobs (the variables that
// travel, ringrun/environment_variables.hpp). Values travel in the launcher's environment; srun
// exports it whole and mpirun gets `-x NAME` (never the value) so the secret is not on any
// command line.
EnvironmentMap shared_environment(const Plan& plan, const LaunchOptions& options) {
  EnvironmentMap env;
  if (plan.ranks.empty()) return env;
  const auto& first = plan.ranks.front().env;
  for (const variables::Variable* v : variables::kAll)
    if (v->travels)
      if (auto value = first.value_of(v->name)) env[v->name] = *value;
  std::string layout, hosts;
  const std::vector<int> counts = ranks_per_host(plan);
  for (std::size_t h = 0; h < plan.hosts.size(); ++h) {
    layout += (h ? "," : "") + std::to_string(counts[h]);
    hosts += (h ? "," : "") + plan.hosts[h];
  }
  env[variables::kLayout.name] = layout;
  env[variables::kHosts.name] = hosts;
  env[variables::kGpusPerRank.name] = std::to_string(options.node.gpus_per_rank);
  env[variables::kBind.name] = options.node.bind ? "cores" : "none";
  if (options.node.cpus_per_rank) env[variables::kCpusPerRank.name] = std::to_string(*options.node.cpus_per_rank);
  for (const auto& x : options.env_args) {
    auto eq = x.find('=');
    std::string name = x.substr(0, eq);
    if (auto value = first.value_of(name)) env[name] = *value;
  }
  return env;
}

// The names of `env` that travel by -x besides the plan's shared ones, sorted.
std::vector<std::string> forwarded_names(const Environment& env, const EnvironmentMap& shared) {
  std::vector<std::string> names;
  for (const auto& [name, value] : env)
    if (forwarded_to_ranks(name) && !shared.count(name)) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> shim_tail(const Plan& plan) {
  std::vector<std::string> tail = {executable_path().string(), "task", "--"};
  tail.insert(tail.end(), plan.command.begin(), plan.command.end());
  return tail;
}

}  // namespace ringrun
