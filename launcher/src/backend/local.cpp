// The local backend: every rank is a child of ringrun on this host, started by clone/exec
// (rank_spawn.hpp).
#include "backend/backend.hpp"
#include "common/subprocess.hpp"

#include <ringrun/slurm.hpp>

namespace ringrun {
namespace {

class LocalBackend final : public Backend {
 public:
  std::vector<std::string> command(const Plan& plan, const LaunchOptions&, const Environment&) const override {
    return plan.command;
  }

  std::vector<ProcessSpec> processes(const Plan& plan, const Environment& env) const override {
    return child_processes(plan, env, [](const RankSlot&) { return true; });
  }
};

}  // namespace

std::vector<ProcessSpec> child_processes(const Plan& plan, const Environment& env,
                                         const std::function<bool(const RankSlot&)>& starts_here) {
  std::vector<ProcessSpec> out;
  std::string executable;
  for (const RankSlot& r : plan.ranks) {
    if (!starts_here(r)) continue;
    ProcessSpec p;
    p.rank = r.rank;
    p.host = r.host;
    p.label = "rank";
    p.argv = plan.command;
    p.env = merge_environment(env, r.env.to_map());
    p.cpus = r.cpus;
    p.stdin_inherit = out.empty();
    // PATH is ringrun's unless -x changed it for the ranks; resolved once, before anything starts.
    if (executable.empty()) {
      std::string path = r.env.value_of("PATH").value_or(search_path(env));
      executable = resolve_program(plan.command.at(0), path);
    }
    p.executable = executable;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> merge_environment(const Environment& base, const EnvironmentMap& overrides) {
  std::vector<std::string> out;
  out.reserve(base.size() + overrides.size());
  for (const auto& [k, v] : base)
    if (!overrides.count(k)) out.push_back(k + "=" + v);
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

std::optional<Allocation> allocation_from_environment(const Environment& env) {
  try {
    return allocation_from_slurm_env(env);
  } catch (const InputError& e) {
    // The variables are Slurm's: the fix is where they came from, not their syntax.
    const std::string what = e.what();
    if (what.find("run inside") != std::string::npos) throw;
    throw InputError(what + "; SLURM_* variables come from sbatch/salloc/srun: run there, or unset SLURM_JOB_ID to run "
                            "without SLURM");
  }
}

std::unique_ptr<Backend> make_local_backend() { return std::make_unique<LocalBackend>(); }

}  // namespace ringrun
