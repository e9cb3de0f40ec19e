// The srun and mpirun backends' common part: one launcher process whose tasks are `ringrun task`,
// the task shim, which plans its own node from its own topology and execs the program; in elastic
// mode one launcher process per slot (backend/srun.cpp, backend/mpirun.cpp).
#pragma once

#include "backend/backend.hpp"
#include "common/subprocess.hpp"

#include <ringrun/environment_variables.hpp>

namespace ringrun {

// How many of the plan's ranks each of its hosts runs, in host order.
std::vector<int> ranks_per_host(const Plan& plan);
// What every task needs to plan itself: the layout, the store, the knobs.
EnvironmentMap shared_environment(const Plan& plan, const LaunchOptions& options);
// The names of `env` that travel by mpirun's -x besides the plan's shared ones, sorted.
std::vector<std::string> forwarded_names(const Environment& env, const EnvironmentMap& shared);
// `ringrun task -- PROGRAM...`: what srun and mpirun start on every node.
std::vector<std::string> shim_tail(const Plan& plan);

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
    p.retag = retag;
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
    p.retag = retag;
    return p;
  }

  mutable EnvironmentMap shared_;
  mutable std::vector<std::string> shim_;  // `ringrun task -- PROGRAM...`, kept by launcher_argv
  mutable std::vector<std::string> argv_;
  mutable std::vector<std::string> unset_;  // left out of the launcher's environment
  mutable EnvironmentMap launcher_only_;    // for srun or mpirun itself, not passed on with -x
};

}  // namespace ringrun
