// The task shim: `ringrun task -- PROGRAM ARGS`, started by srun or mpirun once per rank. It finds
// its rank, plans its own node from its own topology with the same make_plan the launcher used,
// applies the slot (environment, CPU affinity) and execs the program.
#include "facts/cache.hpp"
#include "facts/interface_probe.hpp"
#include "facts/python_package.hpp"
#include "plan/device_env.hpp"
#include "task/output.hpp"

#include <ringrun/variable_read.hpp>
#include <ringrun/plan.hpp>
#include <ringrun/process.hpp>
#include <ringrun/rank_environment.hpp>
#include <ringrun/task.hpp>
#include <ringrun/topology.hpp>
#include <ringrun/topology_cache.hpp>

#include <fmt/format.h>

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace ringrun {
namespace {

// Another launcher's rank or count (OMPI_COMM_WORLD_RANK, SLURM_NTASKS), bounded as RINGRUN_RANK is.
std::optional<int> launcher_number(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return static_cast<int>(variables::parse_integer(name, it->second, 0, variables::kRank.max));
}

// A table variable the launcher passed to the shim (RINGRUN_GPUS_PER_RANK, ...), with its default.
std::optional<int> shim_integer(const Environment& env, const variables::Variable& v) {
  auto value = variables::read_integer(v, &env);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

struct TaskIdentity {
  int rank = 0;
  int size = 1;
  std::optional<int> local_rank;
  const char* source = "";
};

// Open MPI's variables first: under mpirun inside an sbatch job every rank also sees the SLURM
// variables of the orted step (SLURM_LOCALID=0 everywhere), which are wrong for the rank.
TaskIdentity find_identity(const Environment& env) {
  TaskIdentity id;
  // An elastic member's one-task step: the slot is the plan's rank; the size is the plan's (run_task).
  if (auto slot = shim_integer(env, variables::kElasticSlot)) {
    id = {*slot, 0, std::nullopt, "ringrun's elastic supervisor"};
  } else if (auto r = launcher_number(env, "OMPI_COMM_WORLD_RANK")) {
    id = {*r, launcher_number(env, "OMPI_COMM_WORLD_SIZE").value_or(1), launcher_number(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
          "Open MPI"};
  } else if (auto r2 = launcher_number(env, "SLURM_PROCID"); r2 && env.count("SLURM_STEP_ID")) {
    id = {*r2, launcher_number(env, "SLURM_NTASKS").value_or(1), launcher_number(env, "SLURM_LOCALID"), "srun"};
  } else if (auto r3 = launcher_number(env, "PMIX_RANK")) {
    id = {*r3, shim_integer(env, variables::kSize).value_or(1), std::nullopt, "PMIx"};
  } else if (auto r4 = launcher_number(env, "PMI_RANK")) {
    id = {*r4, launcher_number(env, "PMI_SIZE").value_or(1), std::nullopt, "PMI"};
  } else {
    throw InputError("ringrun task: no rank found (none of OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK, PMI_RANK); "
                     "the task shim runs under srun or mpirun started by ringrun");
  }
  return id;
}

// What the elastic supervisor sets for the world a member starts in (elastic/job.cpp's
// member_environment): the member keeps these rather than the plan's world-0 values.
bool names_elastic_member(std::string_view name) {
  const variables::Variable* v = variables::find(name);
  return v && variables::is_world_identity(*v);
}

}  // namespace

namespace {

// `ringrun task --probe-interfaces`: the launcher's interface probe step, one task per node.
int print_probe_line() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  std::string line = netprobe::format_probe_line(host, netprobe::local_interfaces());
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// The job's hosts and ranks per host as the launcher wrote them (RINGRUN_HOSTS, RINGRUN_LAYOUT),
// and which of them holds this rank.
struct TaskLayout {
  Allocation alloc;
  std::size_t own_host = 0;
};

TaskLayout task_layout(const Environment& env, TaskIdentity& id, bool elastic_member) {
  const auto layout_text = variables::read_set(variables::kLayout, &env);
  const auto hosts_text = variables::read_set(variables::kHosts, &env);
  if (!layout_text || !hosts_text)
    throw InputError(fmt::format("ringrun task: {}/{} are not set; start jobs with ringrun, not the shim",
                                 variables::kLayout.name, variables::kHosts.name));
  TaskLayout layout;
  layout.alloc.source = AllocationSource::hosts_flag;
  layout.alloc.explicit_slots = true;
  std::vector<std::string> names = split(*hosts_text);
  std::vector<std::string> counts = split(*layout_text);
  if (names.size() != counts.size())
    throw InputError(fmt::format("ringrun task: {} has {} hosts but {} {} counts", variables::kHosts.name,
                                 names.size(), variables::kLayout.name, counts.size()));
  int first = 0;
  for (std::size_t h = 0; h < names.size(); ++h) {
    int n = std::stoi(counts[h]);
    if (id.rank >= first && id.rank < first + n) layout.own_host = h;
    first += n;
    layout.alloc.hosts.push_back(HostSlots{names[h], n, {}});
  }
  if (elastic_member) id.size = first;
  if (first != id.size || id.rank >= id.size)
    throw InputError(fmt::format("ringrun task: rank {} of {} (from {}) does not fit {}={}", id.rank, id.size,
                                 id.source, variables::kLayout.name, *layout_text));
  return layout;
}

// The launch options the launcher forwarded as RINGRUN_* variables; the launcher chose the
// interface for every node, so all nodes name the same one.
LaunchOptions task_options(const Environment& env, const std::vector<std::string>& program, int size) {
  LaunchOptions options;
  options.num_proc = size;
  options.program = program;
  options.node.gpus_per_rank = *shim_integer(env, variables::kGpusPerRank);
  options.node.bind = *variables::read_text(variables::kBind, &env) != "none";
  options.node.cpus_per_rank = shim_integer(env, variables::kCpusPerRank);
  inherit_visible_gpus(env, options.node);  // CUDA_VISIBLE_DEVICES, or AMD's ROCR_VISIBLE_DEVICES
  if (variables::read_set(variables::kStartTimeout, &env))
    options.start_timeout_s = *variables::read_number(variables::kStartTimeout, &env);
  auto text = [&env](const variables::Variable& v) { return variables::read_text(v, &env); };
  options.network_interface = text(variables::kNetworkInterface);
  options.mem_bind_local = text(variables::kMemBind) == std::optional<std::string>("local");
  options.nccl.algo = text(variables::kNcclAlgo);
  options.nccl.proto = text(variables::kNcclProto);
  options.nccl.ib_gid_index = text(variables::kNcclIbGidIndex);
  options.nccl.tcp = *variables::read_flag(variables::kTcp, &env);
  return options;
}

// This rank's record of the plan, made as the launcher makes it, with this node's topology for
// this node (the others' are not needed).
RankSlot plan_own_slot(const Environment& env, const TaskIdentity& id, const TaskLayout& layout,
                       const LaunchOptions& options) {
  topology::Topology topo = topology::load_live_cached();  // per-node cache: no PCI scan per rank
  PlanInputs in;
  in.allocation = layout.alloc;
  in.launcher_env = env;
  auto text = [&env](const variables::Variable& v) { return variables::read_text(v, &env); };
  in.master_addr = text(variables::kMasterAddr).value_or(layout.alloc.hosts.front().name);
  in.master_port = *shim_integer(env, variables::kMasterPort);
  in.store_addr = text(variables::kStoreAddr).value_or("");
  in.job_secret = text(variables::kJobSecret).value_or("");
  // This node's NCCL facts: the NCCL it loads and its HCA ports' RoCE GIDs.
  in.nccl_version = cached_nccl_version(env);
  // The task shim is the launcher's own executable: the same package folder, found on this node.
  in.python_package_dir = find_python_package_dir(executable_dir());
  in.virtualenv = find_virtualenv(executable_dir());
  in.roce_gid_indexes = topology::roce_gid_indexes(*text(variables::kSysfsRoot), topo);
  in.node_layout = [&](std::size_t host, int local_size) {
    if (host == layout.own_host) return topology::plan_node(topo, local_size, options.node);
    return std::vector<topology::LocalSlot>(static_cast<std::size_t>(local_size));
  };
  Plan plan = make_plan(in, options);
  RankSlot slot = plan.ranks.at(static_cast<std::size_t>(id.rank));
  if (id.local_rank && *id.local_rank != slot.local_rank)
    throw InputError(fmt::format("ringrun task: {} placed rank {} as local rank {}, but the plan has it as local rank "
                                 "{} (block distribution expected)",
                                 id.source, id.rank, *id.local_rank, slot.local_rank));
  return slot;
}

}  // namespace

int run_task(const std::vector<std::string>& program, const Environment& env) {
  if (program.empty()) throw InputError("ringrun task: no program given; write: ringrun task -- PROGRAM [ARGS...]");
  if (program.size() == 1 && program[0] == "--probe-interfaces") return print_probe_line();
  TaskIdentity id = find_identity(env);
  const bool elastic_member = variables::read_set(variables::kElasticSlot, &env).has_value();
  const TaskLayout layout = task_layout(env, id, elastic_member);
  const LaunchOptions options = task_options(env, program, id.size);
  const RankSlot slot = plan_own_slot(env, id, layout, options);

  for (const auto& [k, v] : slot.env.to_map())
    if (!(elastic_member && names_elastic_member(k) && env.count(k))) ::setenv(k.c_str(), v.c_str(), 1);
  // The cpus, and with --mem-bind local the memory on their NUMA nodes (as the local backend binds).
  try {
    topology::bind_to_cpus(slot.cpus, options.mem_bind_local ? slot.numa_nodes : std::vector<int>{});
  } catch (const topology::TopologyError& e) {
    throw InputError(fmt::format("ringrun task: rank {}: {}", id.rank, e.what()));
  }
  // Whole lines through srun and mpirun, whatever their own line handling does.
  start_record_forwarder();
  // The program starts with no signal blocked. Under srun the tasks inherit the mask of the srun
  // that ringrun's supervisor started (SIGUSR1/SIGUSR2/SIGTERM... blocked); a rank's
  // `trap ... USR1` (the preemptible template's checkpoint) would never run.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> argv;
  for (const auto& a : program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  int err = errno;
  throw LaunchError(fmt::format("ringrun task: rank {}: cannot execute '{}': {}", id.rank, program[0],
                                std::strerror(err)), 127);
}

}  // namespace ringrun
