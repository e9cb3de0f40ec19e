// Elastic mode's start (README, Elastic training): what the discovery script's first runs say,
// which launcher fits, and the coordinator's settings for the plan that follows. The launch's
// other steps (launch.cpp) are the same as a fixed job's.
#pragma once

#include "elastic/coordinator.hpp"

#include <ringrun/cli.hpp>
#include <ringrun/plan.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// --discovery-interval, else RINGRUN_DISCOVERY_INTERVAL, else 1 s. Throws InputError naming the
// variable for a value that is not a positive number of seconds.
double discovery_interval(const Invocation& inv, const Environment& env);

// The first world and the plan's hosts with --host-discovery-script.
struct DiscoveredStart {
  // The plan's hosts: the script's, as it named them (localhost and 127.0.0.1 are two hosts, as in
  // Horovod). Hosts of this machine alone (the local launcher) are each planned for every slot
  // they may grow to (--max-np, else the largest count); with another host (mpirun), each host for
  // the slots printed, the first of them up to --max-np in all.
  Allocation hosts;
  std::vector<int> offered;  // each host's slots in the first world (as printed)
  int start_np = 0;          // the first world's ranks: every slot offered, up to --max-np (Horovod)
  int local_host_slots = 0;  // local launcher: the planned slots of a name of this machine printed later
};

// The script's first runs, before anything is planned: they size the plan (a slot the job grows
// into needs its pinning from the plan) and say where the job runs; fewer slots than --min-np wait
// up to --elastic-timeout (a dry run shows the first run's plan and waits for nothing). nullopt
// without a script, or with -H/--hostfile (which require_elastic_launcher refuses beside one).
std::optional<DiscoveredStart> discovered_start(const Invocation& inv, const std::string& self, double interval_s);

// Elastic mode starts its processes itself: on this host; inside a SLURM allocation one srun step
// per process, following the job's node list; on -H/--hostfile hosts or those a discovery script
// names, one mpirun per process. Throws InputError for a launcher or host source that does not fit.
void require_elastic_launcher(const Invocation& inv, LauncherKind launcher, const Allocation& alloc);

// How the first world starts, beside the plan.
struct ElasticStart {
  int start_np = 0;                 // the first world's ranks (0: the plan's)
  std::vector<int> offered;         // each plan host's slots in it (empty: start_np in plan order)
  int local_host_slots = 0;         // DiscoveredStart's
  double discovery_interval_s = DiscoveryPollPolicy::kIntervalSeconds;  // discovery_interval()
  bool named_hosts = false;         // the user named the hosts (-H, --hostfile, a discovery script)
  bool replaced_hosts_return = false;  // an MPIJob's pods (ElasticConfig::replaced_hosts_return)
};

// The coordinator's settings for `plan` (one slot per plan rank).
ElasticConfig elastic_config(const Invocation& inv, const Plan& plan, const ElasticStart& start,
                             const std::string& self, const Environment& plan_env);

}  // namespace ringrun
