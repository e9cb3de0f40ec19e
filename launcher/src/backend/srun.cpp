// The srun backend: one step whose tasks are the task shim, inside a SLURM allocation; in elastic
// mode a one-task step per slot.
#include "backend/cluster_backend.hpp"
#include "facts/srun.hpp"

#include <ringrun/slurm.hpp>

#include <fmt/format.h>

namespace ringrun {
namespace {

// The MPI plugins srun offers (`srun --mpi=list`, asked without a shell); empty when srun is
// absent or gives no answer within kSrunMpiListTimeout.
std::vector<std::string> srun_mpi_plugins(const Environment& env) {
  std::string srun;
  try {
    srun = resolve_program("srun", search_path(env));
  } catch (const LaunchError&) {
    return {};
  }
  auto result = run_program({srun, {srun, "--mpi=list"}, std::nullopt, kSrunMpiListTimeout, ErrorOutput::captured});
  if (!result || result->timed_out) return {};
  return parse_srun_mpi_list(result->output);
}

class SrunBackend final : public ClusterBackend {
  std::vector<std::string> launcher_argv(const Plan& plan, const LaunchOptions& options,
                                         const Environment& env) const override {
    std::vector<std::string> argv = {"srun", fmt::format("--ntasks={}", plan.world_size),
                                     fmt::format("--nodes={}", plan.hosts.size()), "--distribution=block",
                                     "--kill-on-bad-exit=1", "--quiet", "--disable-status"};
    // --quiet: srun's informational lines (a step retried while the last one's nodes are still
    // busy) are not the program's output. --disable-status: Ctrl-C reaches the ranks at once, as
    // in the other modes; srun alone would only print its status (ringrun(1), DESCRIPTION).
    // The task shim pins each rank from the topology, so srun must not bind as well. Under
    // TaskPlugin=task/none srun binds nothing and warns about any --cpu-bind: ask only where
    // the cluster's configuration can bind.
    cpu_bind_none_ = srun_offers_cpu_bind(cached_slurm_task_plugin(env));
    if (cpu_bind_none_) argv.push_back("--cpu-bind=none");
    argv.push_back("--label");  // whose record follows (rank_output.hpp)
    // PMIx for MPI programs launched directly (ringrun's runtime meets through ringrun's store):
    // --srun-mpi pmix always, none never, auto where srun offers it.
    bool pmix = options.srun_mpi == "pmix";
    if (options.srun_mpi == "auto")
      for (const auto& plugin : cached_srun_mpi_plugins(env, [&env] { return srun_mpi_plugins(env); }))
        pmix = pmix || plugin == "pmix";
    if (pmix) argv.push_back("--mpi=pmix");
    if (plan.hosts.size() > 0) {
      std::string list;
      for (std::size_t i = 0; i < plan.hosts.size(); ++i) list += (i ? "," : "") + plan.hosts[i];
      argv.push_back("--nodelist=" + list);
    }
    // sbatch --ntasks-per-node leaves SLURM_NTASKS_PER_NODE, srun's default. A plan with another
    // layout (-np 3 over 2 nodes of 2) makes srun warn that it cannot honour it and ignore it, so
    // srun does not get it then; --ntasks, --nodes and block give the plan's layout.
    unset_.clear();
    if (auto it = env.find("SLURM_NTASKS_PER_NODE"); it != env.end()) {
      const std::vector<int> counts = ranks_per_host(plan);
      for (int n : counts)
        if (std::to_string(n) != it->second) {
          unset_.push_back(it->first);
          break;
        }
    }
    shim_ = shim_tail(plan);  // plan.command becomes srun's own after this call
    argv.insert(argv.end(), shim_.begin(), shim_.end());
    return argv;
  }

  // A step per member (after command()): one that fails or is lost ends alone, and its node's other
  // steps go on. --overlap: the steps share the job's CPUs and GPUs on the node (the shim pins each
  // slot).
  ProcessSpec member(const RankSlot& r, const Environment& env) const override {
    Environment base = env;
    base.erase("SLURM_NTASKS_PER_NODE");  // the job's, which a one-task step cannot honour
    const std::string srun = resolve_program("srun", search_path(env));
    // --disable-status: srun passes one SIGINT (Ctrl-C) on to its task where it would only print
    // the step's status (ringrun(1), Elastic mode); a second within a second still cancels it.
    std::vector<std::string> argv = {"srun", "--nodes=1", "--ntasks=1", "--nodelist=" + r.host, "--overlap",
                                     "--kill-on-bad-exit=1", "--quiet", "--disable-status"};
    if (cpu_bind_none_) argv.push_back("--cpu-bind=none");
    argv.push_back("--label");
    return member_slot(r, std::move(argv), srun, base, {});
  }

  mutable bool cpu_bind_none_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_srun_backend() { return std::make_unique<SrunBackend>(); }

}  // namespace ringrun
