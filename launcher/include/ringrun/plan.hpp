// The plan: one RankSlot per rank, computed by a pure function of the allocation, the per-node
// layout (from the topology) and the options. Backends only turn a Plan into processes.
#pragma once

#include <ringrun/allocation.hpp>
#include <ringrun/topology.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

enum class LauncherKind { automatic, local, srun, mpirun };
const char* to_string(LauncherKind);

struct LaunchOptions {
  std::optional<int> num_proc;                 // -np
  LauncherKind launcher = LauncherKind::automatic;
  std::vector<std::string> env_args;           // -x NAME[=VALUE], in order
  bool oversubscribe = false;
  std::optional<std::string> network_interface;
  std::optional<double> start_timeout_s;       // default scales with the number of hosts
  topology::NodeOptions node;                  // --gpus-per-rank, --bind, --cpus-per-rank
  // Runtime knobs, passed to every rank as RINGRUN_* variables when given.
  std::optional<double> fusion_threshold_mb;
  std::optional<double> cycle_time_ms;
  std::optional<std::string> timeline_filename;
  std::optional<double> stall_check_warning_s;
  std::optional<double> stall_check_shutdown_s;
  std::vector<std::string> program;            // argv of the program, exactly as given
  std::vector<std::string> srun_mpi_plugins;   // from `srun --mpi=list`, when srun launches
  std::string srun_mpi = "auto";               // --srun-mpi auto|pmix|none: srun's --mpi=pmix
};

// What the plan needs from the outside world, gathered by the caller (I/O happens there).
struct PlanInputs {
  Allocation allocation;
  Environment launcher_env;      // ringrun's own environment: -x NAME copies from it, user's
                                 // OMP_NUM_THREADS and CUDA_VISIBLE_DEVICES are seen here
  std::string master_addr;       // first host's address for MASTER_ADDR
  int master_port = 0;           // a free port on the first host
  std::string store_addr;        // host:port of the rendezvous store ringrun hosts
  std::string job_secret;        // per-job secret for the store (never on a command line)
  // The slots of `local_size` ranks on host `host_index`; absent = no topology known (no pinning,
  // no GPU assignment beyond the allocation's GPU list).
  std::function<std::vector<topology::LocalSlot>(std::size_t host_index, int local_size)> node_layout;
};

struct RankSlot {
  int rank = 0;
  std::string host;
  std::size_t host_index = 0;
  int local_rank = 0, local_size = 0, cross_rank = 0, cross_size = 0;
  std::optional<std::string> gpu;           // CUDA_VISIBLE_DEVICES value
  std::vector<unsigned> cpus;               // empty = not pinned
  std::optional<std::string> nic;
  std::map<std::string, std::string> env;   // every variable the plan sets for this rank
};

struct Plan {
  LauncherKind launcher = LauncherKind::local;
  std::vector<std::string> command;         // what the backend runs (program argv for local)
  int world_size = 0;
  std::vector<std::string> hosts;           // hosts used, in order
  std::vector<RankSlot> ranks;
  double start_timeout_s = 30;
};

// Throws InputError (usage: bad -np, too many ranks, ...) with a one-line message.
Plan make_plan(const PlanInputs& inputs, const LaunchOptions& options);

// The number of ranks when -np is absent: the allocation's tasks, else its GPUs, else its hosts;
// for the local host alone, `local_gpus` or 1.
int default_num_proc(const Allocation& allocation, int local_gpus);

// The default start timeout: 30 s plus 1 s per 8 hosts (Horovod's 30 s is too short at scale).
double default_start_timeout(std::size_t num_hosts);

// `--dry-run --json`, the schema of design.md.
std::string plan_to_json(const Plan& plan);
// A human-readable placement table (rank, host, local rank, GPU, cpus, NIC) for --verbose/--dry-run.
std::string plan_to_table(const Plan& plan);

}  // namespace ringrun
