// Elastic mode's start: the discovery script's first runs, the launcher check and the
// coordinator's settings (launch/elastic_start.hpp).
#include "launch/elastic_start.hpp"

#include "backend/table.hpp"
#include "elastic/discovery.hpp"

#include <ringrun/variable_read.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <limits>

namespace ringrun {
namespace {

// Inside a SLURM allocation: the job's nodes as squeue has them now (a DOWN node leaves the list;
// SLURM_JOB_NODELIST never changes), one name per line, then a line `---` and those of them an
// administrator drains (sinfo), which Slurm leaves in the job (ElasticConfig::allocation_discovery).
// Empty output is a failure, not "no nodes": scontrol would fall back to SLURM_JOB_NODELIST.
std::string allocation_node_query(const Environment& env) {
  auto job = env.find("SLURM_JOB_ID");
  return fmt::format("l=$(squeue -h -j {} -o %N) && [ -n \"$l\" ] && d=$(sinfo -h -N -n \"$l\" -t drain -o %N) && "
                     "scontrol show hostnames \"$l\" && echo --- && echo \"$d\" | sort -u",
                     job == env.end() ? "\"$SLURM_JOB_ID\"" : job->second);
}

}  // namespace

double discovery_interval(const Invocation& inv, const Environment& env) {
  if (inv.elastic.discovery_interval_s) return *inv.elastic.discovery_interval_s;
  return *variables::read_number(variables::kDiscoveryInterval, &env);
}

std::optional<DiscoveredStart> discovered_start(const Invocation& inv, const std::string& self, double interval_s) {
  const ElasticOptions& e = inv.elastic;
  if (!e.discovery_script || inv.hosts || inv.hostfile) return std::nullopt;
  const int min_np = e.min_np.value_or(inv.launch.num_proc.value_or(1));
  const StartHosts found = wait_for_start_hosts(*e.discovery_script, e.slots_per_host.value_or(0), self,
                                                inv.dry_run ? 0 : min_np, e.elastic_timeout_s,
                                                inv.launch.launcher == LauncherKind::mpirun, interval_s);
  DiscoveredStart start;
  start.hosts.source = AllocationSource::discovery_script;
  start.hosts.explicit_slots = true;
  const int slots = total_slots(found.hosts);
  if (!found.other_hosts) {
    // min_np: a dry run's script may offer fewer, where the job would wait for them.
    start.local_host_slots = e.max_np.value_or(std::max({slots, inv.launch.num_proc.value_or(0), min_np}));
    for (const HostSlots& h : found.hosts) {
      start.hosts.hosts.push_back(HostSlots{h.name, start.local_host_slots, {}});
      start.offered.push_back(std::min(h.slots, start.local_host_slots));
    }
  } else {
    int left = e.max_np.value_or(std::numeric_limits<int>::max());
    for (const HostSlots& h : found.hosts) {
      if (left == 0) break;
      start.hosts.hosts.push_back(HostSlots{h.name, std::min(h.slots, left), {}});
      start.offered.push_back(start.hosts.hosts.back().slots);
      left -= start.hosts.hosts.back().slots;
    }
  }
  if (start.hosts.hosts.empty()) {  // a dry run whose script offers nothing yet: this host, waiting
    start.hosts.hosts.push_back(HostSlots{"localhost", start.local_host_slots, {}});
    start.offered.push_back(0);
  }
  start.start_np = std::min(slots, e.max_np.value_or(slots));
  return start;
}

void require_elastic_launcher(const Invocation& inv, LauncherKind launcher, const Allocation& alloc) {
  const bool named_hosts = alloc.source == AllocationSource::hosts_flag || alloc.source == AllocationSource::hostfile;
  if (inv.elastic.discovery_script && named_hosts)
    throw InputError(fmt::format("--host-discovery-script '{}' : with -H/--hostfile hosts elastic mode follows the "
                                 "hosts named at the start; leave the script or the hosts out",
                                 *inv.elastic.discovery_script));
  if (!backend_row(launcher).elastic_fits(alloc))
    throw InputError(fmt::format("elastic mode (--min-np/--max-np) runs on this host, inside a SLURM allocation "
                                 "(sbatch/salloc) by srun, or on -H/--hostfile or an MPIJob's hosts by mpirun, but "
                                 "this job would start its ranks with {}; use --launcher local, srun inside an "
                                 "allocation, or mpirun with -H",
                                 to_string(launcher)));
  if (inv.elastic.discovery_script && alloc.source != AllocationSource::discovery_script)
    throw InputError(fmt::format("--host-discovery-script '{}' : with an allocation elastic mode follows the job's "
                                 "own nodes (squeue); leave the script out, or run with --launcher local (this host) "
                                 "or mpirun (the script's hosts)",
                                 *inv.elastic.discovery_script));
}

ElasticConfig elastic_config(const Invocation& inv, const Plan& plan, const ElasticStart& start,
                             const std::string& self, const Environment& plan_env) {
  const ElasticOptions& e = inv.elastic;
  ElasticConfig config;
  for (const RankSlot& r : plan.ranks) {
    if (config.hosts.empty() || config.hosts.back().name != r.host) config.hosts.push_back(HostSlots{r.host, 0, {}});
    ++config.hosts.back().slots;
  }
  const int slots = config.capacity();
  config.start_np = start.start_np > 0 ? std::min(start.start_np, slots) : slots;
  if (start.offered.size() == config.hosts.size()) config.start_offered = start.offered;
  config.min_np = std::min(e.min_np.value_or(config.start_np), config.start_np);
  config.blacklist_hosts = start.named_hosts;
  config.replaced_hosts_return = start.replaced_hosts_return;
  config.discovery_interval_s = start.discovery_interval_s;
  const BackendRow& row = backend_row(plan.launcher);
  if (e.discovery_script) {
    config.discovery_script = *e.discovery_script;
    config.slots_per_host = e.slots_per_host.value_or(0);
    config.self = self;
    config.adds_printed_hosts = row.reaches_hosts;
    if (row.on_loopback) config.local_host_slots = start.local_host_slots;
  }
  if (row.follows_allocation) {
    config.discovery_script = allocation_node_query(plan_env);
    config.allocation_discovery = true;
    config.new_host_slots = config.hosts.front().slots;  // a node the job gains: as the first
    config.self = self;
  }
  config.max_np = e.max_np;
  config.reset_limit = e.reset_limit;
  if (e.cooldown_min_s) config.cooldown = CooldownRange{*e.cooldown_min_s, *e.cooldown_max_s};
  config.elastic_timeout_s = e.elastic_timeout_s;
  config.rank_timeout_s = std::max(e.elastic_timeout_s, plan.start_timeout_s);
  config.grace_period_s = inv.supervisor.grace_period_s;
  if (row.reaped_late)
    config.reset_settle_s = std::chrono::duration<double>(kMpirunResetSettle).count();
  config.seed = std::hash<std::string>{}(plan.ranks.front().env.value_of(variables::kJobSecret.name).value_or(""));
  return config;
}

}  // namespace ringrun
