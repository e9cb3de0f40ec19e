// Diagnostics for administrators: `ringrun check-build` (what this build and this host offer, each
// missing item with its reason) and `ringrun doctor` (checks with PASS/WARN/FAIL and a one-line
// fix). The checks and the renderings are pure functions of gathered facts (unit-tested with
// plain data); probing (files, sysfs, dlopen, child processes) lives in doctor/probe.cpp.
#pragma once

#include <ringrun/allocation.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringrun {

// `ringrun check-build`: prints the checkbox report to stdout; returns 0.
int run_check_build(const Environment& env);

struct DoctorOptions {
  bool json = false;
  bool all_nodes = false;
  bool report = false;
  std::optional<std::string> network_interface;  // --network-interface
};
// `ringrun doctor`: prints the checks (or the JSON array, the report, the per-node tables);
// returns 1 when any check FAILs (or --all-nodes cannot run), else 0.
int run_doctor(const Environment& env, const DoctorOptions& options);

namespace diagnostics {

enum class Status { pass, warn, fail };
const char* to_string(Status);  // "PASS", "WARN", "FAIL"

struct Check {
  std::string name;  // "slurm allocation", "memlock", ...
  Status status = Status::pass;
  std::string detail;  // what was found, one line
  std::string fix;     // one line; empty for PASS
};

// ---- facts, gathered at the edges -------------------------------------------------------------

struct ProgramOutput {
  int exit_code = -1;  // -1: killed (timeout or signal)
  std::string output;  // stdout and stderr together
};
// Runs argv (argv[0] a path) without a shell, stdin from /dev/null, stdout+stderr captured; kills
// it after timeout. nullopt when it could not be started.
std::optional<ProgramOutput> run_program(const std::vector<std::string>& argv, std::chrono::seconds timeout);
// The first executable `program` in env's PATH (kDefaultPath without one).
std::optional<std::string> find_in_path(const Environment& env, const std::string& program);

// The Python binding (ringrun.torch) beside this executable and the torch it would run with.
struct PythonBindingFacts {
  std::optional<std::string> package_dir;  // the folder holding ringrun/ (beside this ringrun, or where python found it)
  std::string searched;                    // where it was looked for (for the message when not found)
  std::optional<std::string> module;       // the _ringrun*.so in package_dir/ringrun
  // What `ringrun python3 train.py` runs: the virtualenv's python3 when pip installed ringrun into
  // one, else python3 on PATH; /usr/bin/python3 when PATH has none.
  std::string interpreter = "/usr/bin/python3";
  std::optional<std::string> python_version;  // "3.11.7"
  std::optional<std::string> torch_version;  // interpreter imported torch and the binding
  std::string torch_error;  // why not: the error's last line (the exception), or a timeout
  // torch imports but ringrun.torch does not (a torch outside the supported range, say): why.
  std::optional<std::string> binding_error;
  // When interpreter failed and is not /usr/bin/python3: torch's version there, if it imports both.
  std::optional<std::string> system_torch_version;
  // TensorFlow as the same interpreter has it: its version, and ringrun.tensorflow's one-line status.
  std::optional<std::string> tensorflow_version;
  std::string tensorflow_status;
};
// Finds the package like the launcher does and asks the interpreter (then /usr/bin/python3) to
// import torch and the binding, as a rank would (20 s each), and TensorFlow.
PythonBindingFacts probe_python_binding(const Environment& env);

struct LibraryProbe {
  std::optional<std::string> version;  // "2.21.5"; nullopt when not loaded
  std::string path;                    // where it was loaded from, when loaded
  std::string origin;                  // where in the search it was found (ringrun/gpu_libraries.hpp)
  std::string error;                   // why not loaded: what was searched and how to get it
};

struct RdmaPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::string state;                  // "4: ACTIVE"
  std::string link_layer;             // "InfiniBand", "Ethernet"
  std::optional<int> roce_gid_index;  // for Ethernet (RoCE) ports: the GID NCCL would pick
};

struct NetInterface {
  std::string name;
  std::string operstate;  // "up", "down", "unknown"
  bool loopback = false;
};

// A Kubernetes pod's job contract as doctor found it (README, On Kubernetes).
struct PodJobFacts {
  std::string error;                      // the contract or its hostfile did not read: the one-line error
  std::string mpijob;                     // "MPIJob hostfile ...: N hosts x S slots"; empty outside an MPIJob
  std::vector<int> slots;                 // each MPIJob host's slots
  std::vector<std::string> unresolved;    // MPIJob hosts with no DNS record now
  std::size_t ssh_checked = 0;            // MPIJob hosts ssh was tried on (the first kDoctorSshHosts)
  std::vector<std::string> ssh_failures;  // "HOST: ssh's last line"
  std::string pod;                        // "pod 1 of 3, 2 ranks each, store at ADDR:PORT"; empty outside one
  std::string master_addr;                // a per-pod job's PET_MASTER_ADDR
  bool master_resolves = false;
};
// How many of an MPIJob's hosts doctor reaches by ssh (one ssh each, in turn).
inline constexpr std::size_t kDoctorSshHosts = 16;

struct HostFacts {
  Environment env;
  std::string hostname;
  std::optional<std::string> srun_path;
  std::optional<std::string> srun_mpi_list;  // output of `srun --mpi=list`, when it ran
  std::string srun_mpi_list_error;           // why it did not, e.g. srun's last line
  std::optional<std::string> mpirun_path;
  std::optional<std::string> mpirun_version;  // first line of `mpirun --version`
  LibraryProbe nccl;
  LibraryProbe cuda_driver;
  std::optional<int> gpus_seen;  // from hwloc; nullopt when it failed
  std::string topology_error;
  std::vector<RdmaPort> rdma_ports;
  std::optional<std::uint64_t> memlock_soft_bytes;  // nullopt = unlimited
  std::optional<std::uint64_t> shm_total_bytes;     // nullopt = /dev/shm missing
  std::optional<std::string> network_interface;     // --network-interface or RINGRUN_NETWORK_INTERFACE
  std::vector<NetInterface> interfaces;             // /sys/class/net
  std::optional<PythonBindingFacts> python;         // nullopt: not probed (no check)
  std::optional<PodJobFacts> pod_job;               // nullopt: not in a Kubernetes job's pod
};

// ---- pure checks ------------------------------------------------------------------------------

// SLURM allocation seen and coherent: parses, tasks vs GPUs per node, SLURM_STEP_GPUS (or
// SLURM_JOB_GPUS) vs CUDA_VISIBLE_DEVICES.
std::vector<Check> check_slurm(const Environment& env);
// Duplicate names in the allocation's expanded host list (`what` names the variable).
Check check_duplicate_hostnames(const std::vector<std::string>& hosts, std::string_view what);
Check check_srun(const HostFacts& facts);
Check check_pmix(const HostFacts& facts);
Check check_mpirun(const HostFacts& facts);
Check check_nccl(const HostFacts& facts);
Check check_cuda_driver(const HostFacts& facts);
Check check_gpu_count(const HostFacts& facts);
std::vector<Check> check_rdma(const HostFacts& facts);
Check check_memlock(std::optional<std::uint64_t> soft_limit_bytes, bool rdma_present);
Check check_shm(std::optional<std::uint64_t> total_bytes);
Check check_network_interface(const std::optional<std::string>& chosen, const std::vector<NetInterface>& interfaces);
// NCCL_SOCKET_IFNAME set to an exclude list that does not also exclude lo (NCCL then may pick lo).
std::optional<Check> check_nccl_socket_ifname(const Environment& env);

// ringrun.torch usable: the package, its module and torch. WARN, never FAIL: only Python jobs need it.
Check check_python_binding(const PythonBindingFacts& facts);

// A Kubernetes job's contract: the MPIJob's hostfile, its hosts' DNS records and ssh, their slots;
// or a per-pod job's PET_* and pod 0's name.
std::vector<Check> check_pod_job(const PodJobFacts& facts);

// Every check, in report order.
std::vector<Check> run_checks(const HostFacts& facts);
bool any_failed(const std::vector<Check>& checks);

// "PASS  name  detail" lines, then "      fix: ..." under WARN/FAIL; a summary line at the end.
std::string render_checks(const std::vector<Check>& checks);
// One JSON array of {"name","status","detail","fix"} on one line.
std::string checks_to_json(const std::vector<Check>& checks);
// The inverse of checks_to_json (for --all-nodes); throws InputError naming `origin` on bad input.
std::vector<Check> checks_from_json(std::string_view text, std::string_view origin);

// --all-nodes: one table per node, the nodes with a FAIL first named in a closing summary, and
// hosts that report the same hostname flagged.
struct NodeChecks {
  std::string node;  // the allocation's name for it
  std::vector<Check> checks;
  std::string error;  // when its output could not be read
};
std::string render_node_tables(const std::vector<NodeChecks>& nodes);
// True when a node failed a check, gave no readable output, or shares its hostname with another.
bool any_node_failed(const std::vector<NodeChecks>& nodes);

// ---- the environment report (--report) --------------------------------------------------------

// True for names containing SECRET, TOKEN, PASSWORD or KEY (any case).
bool is_secret_name(std::string_view name);
// Whether the report lists this variable: RINGRUN_*, SLURM_*, NCCL_*, CUDA_*, OMPI_*, PMIX_*.
bool is_reported_variable(std::string_view name);

struct ReportFacts {
  std::string ringrun_version;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -srm
  std::string cpu;     // model name and count
  std::string hwloc;   // hwloc version and a topology summary
  std::string nccl;    // version or reason
  std::string cuda_driver;
  Environment env;
};
// Markdown, paste-ready; secret variables' values replaced by "<redacted>".
std::string render_report(const ReportFacts& facts);

// ---- check-build ------------------------------------------------------------------------------

struct BuildFacts {
  std::string version;
  std::optional<std::string> runtime_library;  // path of libringrun_runtime when found
  std::string runtime_library_error;
  // Whether the runtime library names NCCL's symbols (built with the NCCL transport); nullopt
  // when the library was not found.
  std::optional<bool> runtime_has_nccl;
  std::optional<std::string> srun_path;
  std::optional<std::string> srun_mpi_list;
  std::string srun_mpi_list_error;
  std::optional<std::string> mpirun_path;
  std::optional<std::string> mpirun_version;
  std::optional<std::string> ompi_info;  // output of `ompi_info`, when it ran
  std::optional<std::uint64_t> shm_total_bytes;
  std::optional<std::uint64_t> shm_free_bytes;
  LibraryProbe nccl;
  LibraryProbe cuda_runtime;
  int cuda_devices = 0;
  std::string cuda_devices_reason;  // why there are none
  std::string hwloc_version;
  std::optional<std::vector<std::string>> gpus;  // names seen by hwloc; nullopt: hwloc failed
  std::optional<std::vector<std::string>> nics;
  std::string topology_error;
  PythonBindingFacts python;
};
std::string render_check_build(const BuildFacts& facts);
// check-build's line for the binding: whether it is ready, and its text.
std::pair<bool, std::string> python_binding_line(const PythonBindingFacts& facts);
std::pair<bool, std::string> tensorflow_binding_line(const PythonBindingFacts& facts);

// Whether `ompi_info` output shows Open MPI's SLURM support (ras/plm/ess slurm components).
bool ompi_has_slurm_support(std::string_view ompi_info_output);
// "1.5 GiB", "64 MiB"
std::string format_bytes(std::uint64_t bytes);

}  // namespace diagnostics
}  // namespace ringrun
