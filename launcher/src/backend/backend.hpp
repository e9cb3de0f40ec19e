// A backend turns a Plan into the processes the supervisor starts. One interface; each
// implementation is one file beside it, and one row of backend/table.hpp says when it is used.
#pragma once

#include <ringrun/plan.hpp>
#include <ringrun/process.hpp>

#include <functional>
#include <memory>
#include <optional>

namespace ringrun {

class Backend {
 public:
  virtual ~Backend() = default;
  // How the processes' output names ranks (its row's, set by make_backend).
  OutputRetag retag = OutputRetag::none;
  // The command line the backend runs, for --dry-run and --verbose (local: the program itself).
  virtual std::vector<std::string> command(const Plan& plan, const LaunchOptions& options,
                                           const Environment& env) const = 0;
  // The processes to start, with their complete environments.
  virtual std::vector<ProcessSpec> processes(const Plan& plan, const Environment& env) const = 0;
  // Elastic mode's slots, one process each by the plan's rank (after command()): the local
  // backend's ranks; srun's one-task step per slot on its node (`srun --nodes=1 --ntasks=1
  // --nodelist=HOST --overlap ... ringrun task`), whose task shim plans the slot it is given in
  // RINGRUN_ELASTIC_SLOT.
  virtual std::vector<ProcessSpec> elastic_slots(const Plan& plan, const Environment& env) const {
    return processes(plan, env);
  }
  // srun and mpirun: the slots of a host the job gained (a node Slurm hands over, a host the
  // discovery script adds), numbered on from `first_slot`, whose shims see it in
  // RINGRUN_HOSTS/RINGRUN_LAYOUT after the plan's hosts and the hosts added before.
  virtual std::vector<ProcessSpec> elastic_added_host(const std::string& /*host*/, int /*slots*/, int /*first_slot*/,
                                                      const Environment& /*env*/) const {
    return {};
  }
};

// The SLURM allocation in ringrun's environment, if any (nullopt outside a job).
std::optional<Allocation> allocation_from_environment(const Environment& env);

// The plan's ranks that `starts_here` picks, as children of ringrun on this host (the local and
// pod backends), the first of them reading ringrun's stdin.
std::vector<ProcessSpec> child_processes(const Plan& plan, const Environment& env,
                                         const std::function<bool(const RankSlot&)>& starts_here);

// NAME=VALUE strings: `base` overlaid by `overrides`.
std::vector<std::string> merge_environment(const Environment& base, const EnvironmentMap& overrides);

}  // namespace ringrun
