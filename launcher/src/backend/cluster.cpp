// The srun and mpirun backends: one launcher process whose tasks are `ringrun task`, the task
// shim, which plans its own node from its own topology and execs the program.
#include "backend/backend.hpp"
#include "common/subprocess.hpp"
#include "facts/python_package.hpp"
#include "facts/srun.hpp"

#include <ringrun/environment_variables.hpp>
#include <ringrun/rank_environment.hpp>
#include <ringrun/slurm.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <random>

namespace ringrun {

std::unique_ptr<Backend> make_local_backend();

namespace {

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

// Whether mpirun passes ringrun's own variable `name` on to every rank by name (-x), as horovodrun
// passes its environment (ringrun(1), DESCRIPTION): srun exports the environment itself and
// local ranks inherit it, but ranks mpirun starts over ssh get only what -x names. Not what each
// node has of its own (its GPUs, its SLURM step, its MPI library's and shell's variables).
bool forwarded_to_ranks(std::string_view name) {
  if (name.empty() || name == "_" || name.find_first_of("%=") != std::string_view::npos) return false;
  for (std::string_view own : {"OLDPWD", "PWD", "HOSTNAME", "SHLVL"})
    if (name == own) return false;
  for (std::string_view prefix : {"BASH_FUNC_", "SLURM_", "OMPI_", "PMIX_", "PMI_", "ORTE_", "OPAL_", "PRTE_"})
    if (name.starts_with(prefix)) return false;
  return !name.ends_with("_VISIBLE_DEVICES") && name != "GPU_DEVICE_ORDINAL";
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

class ClusterBackend : public Backend {
 public:
  std::vector<std::string> command(const Plan& plan, const LaunchOptions& options, const Environment& env) const override {
    shared_ = shared_environment(plan, options);
    argv_ = launcher_argv(plan, options, env);
    return argv_;
  }
  std::vector<ProcessSpec> processes(const Plan& plan, const Environment& env) const override {
    ProcessSpec p;
    p.rank = 0;
    p.host = plan.hosts.empty() ? "?" : plan.hosts.front();
    p.label = argv_.at(0);
    p.argv = argv_;
    Environment launcher_env = env;
    for (const auto& name : unset_) launcher_env.erase(name);
    for (const auto& [name, value] : launcher_only_) launcher_env[name] = value;
    p.env = merge_environment(launcher_env, shared_);
    p.executable = resolve_program(argv_.at(0), search_path(env));
    p.stdin_inherit = true;
    p.retag = retag();
    for (const auto& r : plan.ranks) p.rank_hosts.push_back(r.host);
    return {p};
  }

  // Elastic mode: one process of its own per slot (member()).
  std::vector<ProcessSpec> elastic_slots(const Plan& plan, const Environment& env) const override {
    std::vector<ProcessSpec> out;
    for (const RankSlot& r : plan.ranks) out.push_back(member(r, env));
    return out;
  }
  std::vector<ProcessSpec> elastic_added_host(const std::string& host, int slots, int first_slot,
                                              const Environment& env) const override {
    shared_[variables::kHosts.name] += "," + host;
    shared_[variables::kLayout.name] += "," + std::to_string(slots);
    std::vector<ProcessSpec> out;
    for (int i = 0; i < slots; ++i) {
      RankSlot r;
      r.rank = first_slot + i;
      r.host = host;
      out.push_back(member(r, env));
    }
    return out;
  }

 protected:
  virtual std::vector<std::string> launcher_argv(const Plan&, const LaunchOptions&, const Environment&) const = 0;
  virtual OutputRetag retag() const = 0;
  // Elastic slot `r` as one launcher process of one task on r's host (srun's step, mpirun's -np 1).
  virtual ProcessSpec member(const RankSlot& r, const Environment& env) const = 0;

  // Elastic slot `r` as one process of its own: `launcher_argv` (srun's or mpirun's, for one
  // task on r's host) then the task shim, which plans the slot named by RINGRUN_ELASTIC_SLOT.
  ProcessSpec member_slot(const RankSlot& r, std::vector<std::string> launcher_argv, const std::string& executable,
                          const Environment& base, const EnvironmentMap& extra) const {
    ProcessSpec p;
    p.rank = r.rank;
    p.host = r.host;
    p.label = launcher_argv.front();
    p.argv = std::move(launcher_argv);
    p.argv.insert(p.argv.end(), shim_.begin(), shim_.end());
    EnvironmentMap member = shared_;
    member.insert(extra.begin(), extra.end());
    member.insert(launcher_only_.begin(), launcher_only_.end());
    member[variables::kElasticSlot.name] = std::to_string(r.rank);
    p.env = merge_environment(base, member);
    p.executable = executable;
    p.stdin_inherit = r.rank == 0;
    p.retag = retag();
    return p;
  }

  mutable EnvironmentMap shared_;
  mutable std::vector<std::string> shim_;  // `ringrun task -- PROGRAM...`, kept by launcher_argv
  mutable std::vector<std::string> argv_;
  mutable std::vector<std::string> unset_;  // left out of the launcher's environment
  mutable EnvironmentMap launcher_only_;    // for srun or mpirun itself, not passed on with -x
};

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
      for (const auto& plugin : options.srun_mpi_plugins) pmix = pmix || plugin == "pmix";
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
  OutputRetag retag() const override { return OutputRetag::srun_label; }

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
  OutputRetag retag() const override { return OutputRetag::mpirun_tag; }

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

std::unique_ptr<Backend> make_backend(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::srun: return std::make_unique<SrunBackend>();
    case LauncherKind::mpirun: return std::make_unique<MpirunBackend>();
    default: return make_local_backend();
  }
}

}  // namespace ringrun
