// The plan: one RankSlot per rank, computed by a pure function of the allocation, the per-node
// layout (from the topology) and the options. Backends only turn a Plan into processes.
#pragma once

#include <ringrun/allocation.hpp>
#include <ringrun/nccl_options.hpp>
#include <ringrun/rank_environment.hpp>
#include <ringrun/topology.hpp>

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// How the ranks start (a row each in launcher/src/backend/table.hpp). pod: every pod of a
// Kubernetes job runs ringrun, which starts that pod's ranks (README, On Kubernetes).
enum class LauncherKind { automatic, local, srun, mpirun, pod };
const char* to_string(LauncherKind);

// An interface of this host as the launcher read it (/sys/class/net and getifaddrs).
struct NetworkInterface {
  std::string name;
  bool up = false;
  bool has_ipv4 = false;  // an IPv4 address that is not link-local (169.254.0.0/16)
};

struct InterfaceChoice {
  std::string name;
  std::string reason;  // for --verbose: why this one
};

// Pure: the interface NCCL and the runtime should use when the user named none. Never lo,
// docker*, veth*, virbr* or one without a routable IPv4 address; ib* first, then a netdev of the
// NICs the topology found (`topology_netdevs`, in the order of preference), then the first other
// usable one. nullopt when none qualifies (NCCL then chooses by itself).
std::optional<InterfaceChoice> choose_network_interface(const std::vector<NetworkInterface>& interfaces,
                                                        const std::vector<std::string>& topology_netdevs);

struct LaunchOptions {
  std::optional<int> num_proc;                 // -np
  LauncherKind launcher = LauncherKind::automatic;
  std::vector<std::string> env_args;           // -x NAME[=VALUE], in order
  bool oversubscribe = false;
  std::optional<std::string> network_interface;
  std::optional<double> start_timeout_s;       // default scales with the number of hosts
  topology::NodeOptions node;                  // --gpus-per-rank, --bind, --cpus-per-rank
  bool mem_bind_local = false;                 // --mem-bind local: memory on the rank's NUMA node(s)
  NcclOptions nccl;
  // Runtime knobs, passed to every rank as RINGRUN_* variables when given.
  std::optional<double> fusion_threshold_mb;
  std::optional<double> cycle_time_ms;
  std::optional<std::string> timeline_filename;
  bool timeline_mark_cycles = false;
  std::optional<int> cache_capacity;
  std::optional<double> stall_check_warning_s;
  std::optional<double> stall_check_shutdown_s;
  std::vector<std::string> program;            // argv of the program, exactly as given
  // horovodrun's -p PORT and -i FILE, for the ssh that mpirun reaches -H hosts with: mpirun gets
  // them as OMPI_MCA_plm_rsh_args (after the user's own), as horovodrun passes them.
  std::vector<std::string> ssh_args;
  // horovodrun's --mpi-args, one word each: on every mpirun command line after ringrun's own
  // options (ringrun(1), HOROVODRUN OPTIONS). Given with --launcher auto, mpirun starts the ranks.
  std::vector<std::string> mpirun_args;
  std::vector<std::string> srun_mpi_plugins;   // from `srun --mpi=list`, when srun launches
  std::string srun_mpi = "auto";               // --srun-mpi auto|pmix|none: srun's --mpi=pmix
};

// What the plan needs from the outside world, gathered by the caller (I/O happens there).
struct PlanInputs {
  Allocation allocation;
  Environment launcher_env;      // ringrun's own environment: -x NAME copies from it, user's
                                 // OMP_NUM_THREADS and *_VISIBLE_DEVICES are seen here
  std::string master_addr;       // first host's address for MASTER_ADDR
  int master_port = 0;           // a free port on the first host
  std::string store_addr;        // host:port of the rendezvous store ringrun hosts
  std::string job_secret;        // per-job secret for the store (never on a command line)
  // The slots of `local_size` ranks on host `host_index`; absent = no topology known (no pinning,
  // no GPU assignment beyond the allocation's GPU list).
  std::function<std::vector<topology::LocalSlot>(std::size_t host_index, int local_size)> node_layout;
  // NCCL facts of this host, found by the caller.
  std::optional<int> nccl_version;               // ncclGetVersion of libnccl.so.2; nullopt: not found
  std::map<std::string, int> roce_gid_indexes;   // "mlx5_0:1" -> topology::roce_gid_index; absent: none
  std::optional<InterfaceChoice> chosen_interface;  // choose_network_interface, when no --network-interface
  // The folder holding the `ringrun` Python package (ringrun.torch) beside this ringrun, found by
  // the caller; every rank's PYTHONPATH gets it (see make_plan). nullopt: a build without it.
  std::optional<std::string> python_package_dir;
  // The Python virtualenv (its root, holding pyvenv.cfg) this ringrun was installed into by pip,
  // found by the caller: every rank's PATH then starts with its bin/ and VIRTUAL_ENV names it, so
  // `ringrun python train.py` runs that environment's python even when it is not activated.
  std::optional<std::string> virtualenv;
};

struct RankSlot {
  int rank = 0;
  std::string host;
  std::size_t host_index = 0;
  int local_rank = 0, local_size = 0, cross_rank = 0, cross_size = 0;
  std::optional<std::string> gpu;           // CUDA_VISIBLE_DEVICES (AMD: ROCR_VISIBLE_DEVICES) value
  std::vector<unsigned> cpus;               // empty = not pinned
  std::optional<std::string> nic;
  std::vector<int> numa_nodes;              // NUMA nodes of `cpus` (memory binding)
  std::optional<int> roce_gid_index;        // what NCCL >= 2.21 picks for the rank's HCA port (reported)
  RankEnvironment env;                      // every variable the plan sets for this rank
};

struct Plan {
  LauncherKind launcher = LauncherKind::local;
  std::vector<std::string> command;         // what the backend runs (program argv for local)
  int world_size = 0;
  std::vector<std::string> hosts;           // hosts used, in order
  std::vector<RankSlot> ranks;
  double start_timeout_s = 30;
  // One line each, printed by the caller: contradictions between options and the user's own
  // variables (the user's value wins) as "ringrun: warning: ...", and the reasons of choices
  // (--verbose).
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
};

// Throws InputError (usage: bad -np, too many ranks, ...) with a one-line message.
// PYTHONPATH: with `python_package_dir`, every rank gets it first, before ringrun's own
// PYTHONPATH (the binding that matches this launcher wins over another ringrun on the path). A
// user's -x PYTHONPATH is the search order the user chose: kept first, with the folder appended
// (so `import ringrun` still works). A folder already listed is not added again (nested ringrun,
// the task shim re-planning under srun/mpirun).
Plan make_plan(const PlanInputs& inputs, const LaunchOptions& options);

// The number of ranks when -np is absent: the allocation's tasks, else its GPUs, else its hosts;
// for the local host alone, `local_gpus` or 1.
int default_num_proc(const Allocation& allocation, int local_gpus);

// The default start timeout: 30 s plus 1 s per 8 hosts (Horovod's 30 s is too short at scale).
double default_start_timeout(std::size_t num_hosts);

// `--dry-run --json`, the schema ringrun(1) gives under --json. write_plan_json streams it in
// chunks of about 1 MiB (a 32,768-rank plan is 34 MB of JSON); what ranks share is escaped once
// per plan.
std::string plan_to_json(const Plan& plan);
void write_plan_json(const Plan& plan, std::ostream& out);
// A human-readable placement table (rank, host, local rank, GPU, cpus, NIC) for --verbose/--dry-run.
std::string plan_to_table(const Plan& plan);

}  // namespace ringrun
