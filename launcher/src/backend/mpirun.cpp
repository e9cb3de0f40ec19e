// The mpirun backend (Open MPI 4 and 5): one mpirun whose processes are the task shim, on -H,
// --hostfile, an MPIJob's or a discovery script's hosts; in elastic mode an mpirun of one process
// per slot.
#include "backend/cluster_backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <random>

namespace ringrun {
namespace {

class MpirunBackend final : public ClusterBackend {
  std::vector<std::string> launcher_argv(const Plan& plan, const LaunchOptions& options, const Environment& env) const override {
    // horovodrun's -p/-i: the ssh mpirun reaches -H hosts with takes them after the user's own.
    launcher_only_.clear();
    if (!options.ssh_args.empty()) {
      const std::string ours = fmt::format("{}", fmt::join(options.ssh_args, " "));
      auto it = env.find("OMPI_MCA_plm_rsh_args");
      launcher_only_["OMPI_MCA_plm_rsh_args"] = it == env.end() || it->second.empty() ? ours : it->second + " " + ours;
    }
    std::vector<std::string> argv = {"mpirun"};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.push_back("--tag-output");  // whose chunk follows; the records make lines whole (rank_output.hpp)
    argv.push_back("-np");
    argv.push_back(std::to_string(plan.world_size));
    std::string hosts;
    const std::vector<int> counts = ranks_per_host(plan);
    for (std::size_t h = 0; h < plan.hosts.size(); ++h)
      hosts += fmt::format("{}{}:{}", h ? "," : "", plan.hosts[h], counts[h]);
    argv.insert(argv.end(), {"-H", hosts, "--bind-to", "none", "--map-by", "slot"});
    if (options.oversubscribe) argv.push_back("--oversubscribe");
    for (const auto& [name, value] : shared_) argv.insert(argv.end(), {"-x", name});
    for (const std::string& name : forwarded_names(env, shared_)) argv.insert(argv.end(), {"-x", name});
    mpirun_args_ = options.mpirun_args;
    argv.insert(argv.end(), mpirun_args_.begin(), mpirun_args_.end());
    shim_ = shim_tail(plan);  // plan.command becomes mpirun's own after this call
    argv.insert(argv.end(), shim_.begin(), shim_.end());
    return argv;
  }

  // -H/--hostfile hosts (or a discovery script's): an mpirun of one process per member (after
  // command()), which reaches its host as mpirun does (ssh, or srun inside an allocation). Values
  // travel in the environment, names on the command line (-x), so the secret is on none.
  ProcessSpec member(const RankSlot& r, const Environment& env) const override {
    std::vector<std::string> names = forwarded_names(env, shared_);
    for (const auto& [name, value] : shared_) names.push_back(name);
    for (const variables::Variable* v : variables::kAll)
      if (variables::is_world_identity(*v)) names.emplace_back(v->name);
    names.insert(names.end(), {variables::kElasticSlot.name, variables::kElasticId.name, variables::kElasticEpoch.name,
                               variables::kElasticTimeout.name});
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    // Inside an allocation mpirun starts its orted by srun: a step per member on one node must
    // share the node with the others, or it waits for them to end.
    EnvironmentMap extra;
    if (env.count("SLURM_JOB_ID") && !env.count("OMPI_MCA_plm_slurm_args")) extra["OMPI_MCA_plm_slurm_args"] = "--overlap";
    // Open MPI's session directory tree of its own: the members' mpiruns (and their orteds on a
    // host) share one top directory, which each removes at its end once empty, so a member
    // starting while another ends could find it gone between its mkdir and its stat ("A call to
    // mkdir was unable to create the desired directory ... File exists") and fail. Open MPI
    // removes this one with its member.
    if (!env.count("OMPI_MCA_orte_top_session_dir")) {
      auto base = env.find("OMPI_MCA_orte_tmpdir_base");
      if (base == env.end()) base = env.find("TMPDIR");
      const std::string tmp = base != env.end() && !base->second.empty() ? base->second : "/tmp";
      // The pid and a random word: pid namespaces (containers) may share a /tmp.
      static const unsigned job_word = std::random_device{}();
      extra["OMPI_MCA_orte_top_session_dir"] =
          fmt::format("{}/ompi.ringrun.{}.{}.{:08x}.{}", tmp, ::geteuid(), ::getpid(), job_word, members_started_++);
    }
    std::vector<std::string> argv = {"mpirun"};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"--tag-output", "-np", "1", "-H", r.host + ":1", "--bind-to", "none"});
    for (const std::string& name : names) argv.insert(argv.end(), {"-x", name});
    argv.insert(argv.end(), mpirun_args_.begin(), mpirun_args_.end());
    return member_slot(r, std::move(argv), resolve_program("mpirun", search_path(env)), env, extra);
  }

  mutable std::vector<std::string> mpirun_args_;  // horovodrun's --mpi-args, from command()
  mutable unsigned members_started_ = 0;           // names each member's session directory
};

}  // namespace

std::unique_ptr<Backend> make_mpirun_backend() { return std::make_unique<MpirunBackend>(); }

}  // namespace ringrun
