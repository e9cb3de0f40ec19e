// A backend turns a Plan into the processes the supervisor starts. One interface; the local,
// srun and mpirun implementations live beside it.
#pragma once

#include <ringrun/plan.hpp>
#include <ringrun/supervisor.hpp>

#include <memory>
#include <optional>

namespace ringrun {

class Backend {
 public:
  virtual ~Backend() = default;
  // The command line the backend runs, for --dry-run and --verbose (local: the program itself).
  virtual std::vector<std::string> command(const Plan& plan, const LaunchOptions& options,
                                           const Environment& env) const = 0;
  // The processes to start, with their complete environments.
  virtual std::vector<ProcessSpec> processes(const Plan& plan, const Environment& env) const = 0;
};

std::unique_ptr<Backend> make_backend(LauncherKind kind);

// The SLURM allocation in ringrun's environment, if any (nullopt outside a job).
std::optional<Allocation> allocation_from_environment(const Environment& env);

// NAME=VALUE strings: `base` overlaid by `overrides`.
std::vector<std::string> merge_environment(const Environment& base, const EnvironmentMap& overrides);

}  // namespace ringrun
