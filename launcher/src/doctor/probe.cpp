// The probing half of the diagnostics: files, sysfs, dlopen, child processes (run without a
// shell). Everything found here becomes plain facts for the pure checks in doctor/checks.cpp.
#include "common/subprocess.hpp"
#include "doctor/doctor.hpp"
#include "facts/pod_job.hpp"
#include "facts/python_package.hpp"
#include "facts/srun.hpp"

#include <ringrun/variable_read.hpp>
#include <ringrun/gpu_libraries.hpp>
#include <ringrun/kubernetes.hpp>
#include <ringrun/slurm.hpp>
#include <ringrun/topology.hpp>

#include <dlfcn.h>
#include <hwloc.h>
#include <link.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#ifndef RINGRUN_VERSION
#define RINGRUN_VERSION "0.0.0"
#endif

namespace ringrun {
namespace {

namespace fs = std::filesystem;
using namespace diagnostics;

std::optional<std::string> env_value(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// The first line of a file, without its newline; nullopt when unreadable.
std::optional<std::string> read_first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

}  // namespace

std::optional<std::string> diagnostics::find_in_path(const Environment& env, const std::string& program) {
  return ringrun::find_in_path(program, env_value(env, "PATH").value_or(kDefaultPath));
}

std::optional<ProgramOutput> diagnostics::run_program(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  auto result = ringrun::run_program({argv.at(0), argv, std::nullopt, timeout, ErrorOutput::captured});
  if (!result) return std::nullopt;
  return ProgramOutput{result->exit_code().value_or(-1), std::move(result->output)};
}

namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Loads `soname` (then each fallback path) and calls `symbol`(int*) for a version code.
LibraryProbe probe_library(const char* soname, const std::vector<std::string>& fallbacks, const char* symbol,
                           std::string (*format_version)(int), const std::string& where_searched) {
  LibraryProbe probe;
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  std::string first_error = handle ? "" : ::dlerror();
  for (const auto& path : fallbacks) {
    if (handle) break;
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) ::dlerror();
  }
  if (!handle) {
    probe.error = fmt::format("{} not found in {} ({})", soname, where_searched, first_error);
    return probe;
  }
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) probe.path = map->l_name;
  using VersionFunction = int (*)(int*);
  auto get_version = reinterpret_cast<VersionFunction>(::dlsym(handle, symbol));
  int code = 0;
  if (!get_version)
    probe.error = fmt::format("{} has no {} ({})", probe.path.empty() ? soname : probe.path, symbol, ::dlerror());
  else if (int rc = get_version(&code); rc != 0)
    probe.error = fmt::format("{} failed with code {}", symbol, rc);
  else
    probe.version = format_version(code);
  ::dlclose(handle);
  return probe;
}

// NCCL or the CUDA runtime as a rank would find it (the search of ringrun/gpu_libraries.hpp, from
// this program's folder, reading `env`); unloaded again after its version is read.
LibraryProbe probe_gpu_library(gpu::Library library, const Environment& env) {
  gpu::SearchContext context{executable_path().parent_path().string(), gpu::variables_of(env)};
  gpu::Lookup lookup = gpu::find(library, context, /*lazy=*/true);
  LibraryProbe probe;
  if (!lookup.found) {
    probe.error = lookup.error;
    return probe;
  }
  probe.version = gpu::version_text(library, lookup.found->version);
  probe.path = lookup.found->path;
  probe.origin = lookup.found->origin;
  gpu::release(*lookup.found);
  return probe;
}

LibraryProbe probe_nccl(const Environment& env) { return probe_gpu_library(gpu::Library::nccl, env); }

LibraryProbe probe_cuda_driver() {
  // The driver's version code reads as the CUDA runtime's (12040 -> "12.4").
  auto cuda_version = [](int code) { return gpu::version_text(gpu::Library::cuda_runtime, code); };
  return probe_library("libcuda.so.1", {}, "cuDriverGetVersion", cuda_version,
                       "LD_LIBRARY_PATH or the loader's default paths");
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::vector<RdmaPort> probe_rdma_ports(const std::string& sysfs_root) {
  std::vector<RdmaPort> ports;
  std::error_code ec;
  fs::path root = fs::path(sysfs_root) / "class/infiniband";
  if (!fs::is_directory(root, ec)) return ports;
  std::vector<fs::path> devices;
  for (const auto& entry : fs::directory_iterator(root, ec)) devices.push_back(entry.path());
  std::sort(devices.begin(), devices.end());
  for (const auto& device : devices) {
    std::vector<int> port_numbers;
    for (const auto& entry : fs::directory_iterator(device / "ports", ec)) {
      try {
        port_numbers.push_back(std::stoi(entry.path().filename().string()));
      } catch (const std::exception&) {
      }
    }
    std::sort(port_numbers.begin(), port_numbers.end());
    for (int number : port_numbers) {
      fs::path port_dir = device / "ports" / std::to_string(number);
      RdmaPort port;
      port.device = device.filename().string();
      port.port = number;
      port.state = read_first_line(port_dir / "state").value_or("unknown");
      port.link_layer = read_first_line(port_dir / "link_layer").value_or("unknown");
      if (port.link_layer == "Ethernet")
        port.roce_gid_index = topology::roce_gid_index(sysfs_root, port.device, number);
      ports.push_back(port);
    }
  }
  return ports;
}

std::vector<NetInterface> probe_interfaces() {
  std::vector<NetInterface> interfaces;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/class/net", ec)) {
    NetInterface iface;
    iface.name = entry.path().filename().string();
    iface.operstate = read_first_line(entry.path() / "operstate").value_or("unknown");
    auto flags = read_first_line(entry.path() / "flags");
    constexpr unsigned long kLoopbackFlag = 0x8;  // IFF_LOOPBACK
    try {
      iface.loopback = flags && (std::stoul(*flags, nullptr, 16) & kLoopbackFlag);
    } catch (const std::exception&) {
      iface.loopback = iface.name == "lo";
    }
    interfaces.push_back(iface);
  }
  std::sort(interfaces.begin(), interfaces.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return interfaces;
}

std::optional<std::uint64_t> memlock_soft_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::uint64_t>(limit.rlim_cur);
}

struct ShmSize {
  std::optional<std::uint64_t> total, free;
};
ShmSize shm_size() {
  struct statvfs info {};
  if (::statvfs("/dev/shm", &info) != 0) return {};
  return {static_cast<std::uint64_t>(info.f_blocks) * info.f_frsize,
          static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize};
}

std::string hwloc_version() {
  unsigned api = hwloc_get_api_version();
  return fmt::format("{} (runtime API {}.{}.{})", HWLOC_VERSION, api >> 16, (api >> 8) & 0xff, api & 0xff);
}

// The output of `srun --mpi=list`, or why there is none (srun's last line of output).
std::optional<std::string> srun_mpi_list(const std::optional<std::string>& srun, std::string& error) {
  if (!srun) return std::nullopt;
  auto result = run_program({*srun, "--mpi=list"}, kSrunMpiListTimeout);
  if (!result) {
    error = "could not start " + *srun;
    return std::nullopt;
  }
  if (result->exit_code != 0) {
    std::string output = result->output;
    while (!output.empty() && output.back() == '\n') output.pop_back();
    std::size_t last = output.rfind('\n');
    error = result->exit_code < 0 ? fmt::format("killed after {} s", kSrunMpiListTimeout.count())
                                  : output.substr(last == std::string::npos ? 0 : last + 1);
    if (error.empty()) error = fmt::format("exit code {}", result->exit_code);
    return std::nullopt;
  }
  return result->output;
}

std::optional<std::string> mpirun_version(const std::optional<std::string>& mpirun) {
  if (!mpirun) return std::nullopt;
  auto result = run_program({*mpirun, "--version"}, std::chrono::seconds(20));
  if (!result || result->exit_code != 0 || result->output.empty()) return std::nullopt;
  return first_line(result->output);
}

// The last line of `text` that has any.
std::string last_line(const std::string& text) {
  std::string line;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find_first_not_of(" \t\r") != std::string::npos) line = l;
  return line;
}

// A Kubernetes job's contract (facts/pod_job.hpp), its MPIJob hosts' DNS and ssh; nullopt outside.
std::optional<diagnostics::PodJobFacts> probe_pod_job(const Environment& env) {
  diagnostics::PodJobFacts facts;
  try {
    const PodJob job = pod_job(env, false);
    if (job.pod) {
      facts.pod = fmt::format("pod {} of {}, {} ranks each, store at {}:{}", job.pod->node_rank, job.pod->nnodes,
                              job.pod->nproc_per_node ? std::to_string(*job.pod->nproc_per_node) : "auto",
                              job.pod->master_addr, job.pod->master_port);
      facts.master_addr = job.pod->master_addr;
      facts.master_resolves = host_resolves(job.pod->master_addr);
      return facts;
    }
    if (!job.mpijob) return std::nullopt;
    const Allocation hosts = read_mpijob_hostfile(*job.mpijob);
    facts.mpijob = describe_mpijob(*job.mpijob, hosts);
    const std::optional<std::string> ssh = diagnostics::find_in_path(env, "ssh");
    for (const HostSlots& h : hosts.hosts) {
      facts.slots.push_back(h.slots);
      if (!host_resolves(h.name)) {
        facts.unresolved.push_back(h.name);
      } else if (ssh && facts.ssh_checked < diagnostics::kDoctorSshHosts) {
        ++facts.ssh_checked;
        const auto result = diagnostics::run_program(
            {*ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", h.name, "true"}, std::chrono::seconds(10));
        if (!result || result->exit_code != 0)
          facts.ssh_failures.push_back(
              fmt::format("{}: {}", h.name, result ? last_line(result->output) : std::string("ssh did not start")));
      }
    }
  } catch (const InputError& e) {
    facts.error = e.what();
  }
  return facts;
}

HostFacts gather_host_facts(const Environment& env, const DoctorOptions& options) {
  HostFacts facts;
  facts.env = env;
  facts.hostname = hostname();
  facts.srun_path = diagnostics::find_in_path(env, "srun");
  facts.srun_mpi_list = srun_mpi_list(facts.srun_path, facts.srun_mpi_list_error);
  facts.mpirun_path = diagnostics::find_in_path(env, "mpirun");
  facts.mpirun_version = mpirun_version(facts.mpirun_path);
  facts.nccl = probe_nccl(env);
  facts.cuda_driver = probe_cuda_driver();
  try {
    facts.gpus_seen = static_cast<int>(topology::load_live().gpus.size());
  } catch (const std::exception& e) {
    facts.topology_error = e.what();
  }
  facts.rdma_ports = probe_rdma_ports("/sys");
  facts.memlock_soft_bytes = memlock_soft_limit();
  facts.shm_total_bytes = shm_size().total;
  facts.network_interface =
      options.network_interface ? options.network_interface : variables::read_text(variables::kNetworkInterface, &env);
  facts.interfaces = probe_interfaces();
  facts.python = probe_python_binding(env);
  facts.pod_job = probe_pod_job(env);
  return facts;
}

// ---- --report ---------------------------------------------------------------------------------

std::string os_name() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
    std::string value = line.substr(12);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return value;
  }
  return "unknown (/etc/os-release unreadable)";
}

std::string kernel_name() {
  utsname names{};
  if (::uname(&names) != 0) return "unknown";
  return fmt::format("{} {} {}", names.sysname, names.release, names.machine);
}

std::string cpu_summary() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line))
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return fmt::format("{} ({} online CPUs)", model.empty() ? "unknown model" : model, online);
}

std::string topology_summary() {
  try {
    auto topo = topology::load_live();
    std::vector<std::string> nics;
    for (const auto& nic : topo.nics) nics.push_back(nic.name + "(" + nic.kind + ")");
    std::string nic_list;
    for (std::size_t i = 0; i < nics.size(); ++i) nic_list += (i ? ", " : "") + nics[i];
    return fmt::format("{}; {} NUMA node(s), {} core(s), {} GPU(s), NICs: {}", hwloc_version(), topo.numa_nodes.size(),
                       topo.cores.size(), topo.gpus.size(), nic_list.empty() ? "none" : nic_list);
  } catch (const std::exception& e) {
    return fmt::format("{}; topology unreadable: {}", hwloc_version(), e.what());
  }
}

// ---- --all-nodes ------------------------------------------------------------------------------

int run_doctor_all_nodes(const Environment& env, const DoctorOptions& options) {
  auto job_id = env_value(env, "SLURM_JOB_ID");
  if (!job_id) job_id = env_value(env, "SLURM_JOBID");
  auto nodelist = env_value(env, "SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = env_value(env, "SLURM_NODELIST");
  if (!job_id || !nodelist) {
    std::cerr
        << "ringrun doctor --all-nodes: not inside a SLURM allocation (SLURM_JOB_ID or SLURM_JOB_NODELIST unset); "
           "run it under salloc or sbatch, or run `ringrun doctor` on each host\n";
    return 2;
  }
  std::vector<std::string> hosts = expand_hostlist(*nodelist, max_hostlist_names(env), "SLURM_JOB_NODELIST");
  auto srun = diagnostics::find_in_path(env, "srun");
  if (!srun) {
    std::cerr << "ringrun doctor --all-nodes: srun not found in PATH; add Slurm's bin directory to PATH\n";
    return 1;
  }
  std::vector<std::string> argv = {*srun,
                                   fmt::format("--nodes={}", hosts.size()),
                                   fmt::format("--ntasks={}", hosts.size()),
                                   "--ntasks-per-node=1",
                                   "--label",
                                   executable_path().string()};
  if (options.network_interface) {
    argv.push_back("--network-interface");
    argv.push_back(*options.network_interface);
  }
  argv.push_back("doctor");
  argv.push_back("--json");
  auto result = run_program(argv, std::chrono::seconds(300));
  if (!result) {
    std::cerr << fmt::format("ringrun doctor --all-nodes: could not start {}\n", *srun);
    return 1;
  }
  // `--label` prefixes each line with "TASK: "; with one task per node, task i runs on hosts[i].
  std::vector<NodeChecks> nodes(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) nodes[i].node = hosts[i];
  std::vector<std::string> other_lines;
  std::vector<std::string> json_of(hosts.size());
  std::istringstream lines(result->output);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t colon = line.find(": ");
    std::size_t task = hosts.size();
    if (colon != std::string::npos) {
      try {
        task = std::stoul(line.substr(0, colon));
      } catch (const std::exception&) {
      }
    }
    std::string body = colon == std::string::npos ? line : line.substr(colon + 2);
    // srun's labelled output cuts lines at 1024 bytes and labels each piece: a task's JSON
    // arrives as its '[' line plus continuation lines, joined here until the array closes.
    bool starts = !body.empty() && body[0] == '[';
    bool continues = task < hosts.size() && !json_of[task].empty() && json_of[task].back() != ']';
    if (task >= hosts.size() || (!starts && !continues)) {
      other_lines.push_back(line);
      continue;
    }
    if (starts && !continues) json_of[task].clear();
    json_of[task] += body;
  }
  for (std::size_t task = 0; task < hosts.size(); ++task) {
    if (json_of[task].empty()) continue;
    try {
      nodes[task].checks = checks_from_json(json_of[task], fmt::format("doctor output of {}", hosts[task]));
    } catch (const InputError& e) {
      nodes[task].error = e.what();
    }
  }
  for (auto& node : nodes)
    if (node.checks.empty() && node.error.empty())
      node.error = fmt::format("no doctor output from {} (srun exited {}; see below)", node.node, result->exit_code);
  std::cout << render_node_tables(nodes);
  if (!other_lines.empty()) {
    std::cout << "\nOther output of srun:\n";
    for (const auto& l : other_lines) std::cout << "  " << l << "\n";
  }
  return any_node_failed(nodes) ? 1 : 0;
}

}  // namespace

int run_check_build(const Environment& env) {
  BuildFacts facts;
  facts.version = RINGRUN_VERSION;

  // The runtime library programs link, next to this executable (build tree or install prefix).
  fs::path bin_dir = executable_path().parent_path();
  fs::path lib_dir_default = (bin_dir / ".." / "lib").lexically_normal();
  std::vector<fs::path> candidates;
  for (const char* lib_dir : {"lib", "lib64"}) {
    candidates.push_back(bin_dir / ".." / lib_dir / "libringrun_runtime.so.0");
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(bin_dir / ".." / "lib", ec))
    if (entry.is_directory(ec)) candidates.push_back(entry.path() / "libringrun_runtime.so.0");
  for (const auto& candidate : candidates) {
    if (!fs::exists(candidate, ec)) continue;
    facts.runtime_library = candidate.lexically_normal().string();
    std::ifstream in(candidate, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    facts.runtime_has_nccl = content.find("ncclCommInitRank") != std::string::npos;
    break;
  }
  if (!facts.runtime_library)
    facts.runtime_library_error = fmt::format(
        "libringrun_runtime.so.0 not found in {} (build the ringrun_runtime target, "
        "or install ringrun)",
        lib_dir_default.string());

  facts.srun_path = diagnostics::find_in_path(env, "srun");
  facts.srun_mpi_list = srun_mpi_list(facts.srun_path, facts.srun_mpi_list_error);
  facts.mpirun_path = diagnostics::find_in_path(env, "mpirun");
  facts.mpirun_version = mpirun_version(facts.mpirun_path);
  if (auto ompi_info = diagnostics::find_in_path(env, "ompi_info")) {
    auto result = run_program({*ompi_info}, std::chrono::seconds(30));
    if (result && result->exit_code == 0) facts.ompi_info = result->output;
  }
  // Open MPI 5 starts its processes through PRRTE, whose components (SLURM's plm) prte_info lists.
  if (facts.ompi_info && facts.mpirun_version && facts.mpirun_version->find("Open MPI) 5") != std::string::npos)
    if (auto prte_info = diagnostics::find_in_path(env, "prte_info")) {
      auto result = run_program({*prte_info}, std::chrono::seconds(30));
      if (result && result->exit_code == 0) *facts.ompi_info += result->output;
    }
  auto shm = shm_size();
  facts.shm_total_bytes = shm.total;
  facts.shm_free_bytes = shm.free;
  facts.nccl = probe_nccl(env);
  facts.cuda_runtime = probe_gpu_library(gpu::Library::cuda_runtime, env);
  gpu::Devices devices = gpu::cuda_devices();
  facts.cuda_devices = devices.count;
  facts.cuda_devices_reason = devices.reason;
  facts.hwloc_version = hwloc_version();
  facts.python = probe_python_binding(env);
  try {
    auto topo = topology::load_live();
    facts.gpus.emplace();
    facts.nics.emplace();
    for (const auto& gpu : topo.gpus)
      facts.gpus->push_back(fmt::format("{} {}", gpu.name.empty() ? gpu.vendor : gpu.name, gpu.bus_id));
    for (const auto& nic : topo.nics) facts.nics->push_back(fmt::format("{} {}", nic.name, nic.kind));
  } catch (const std::exception& e) {
    facts.topology_error = e.what();
  }
  std::cout << render_check_build(facts);
  return 0;
}

int run_doctor(const Environment& env, const DoctorOptions& options) {
  if (options.all_nodes) return run_doctor_all_nodes(env, options);
  if (options.report) {
    ReportFacts report;
    report.ringrun_version = RINGRUN_VERSION;
    report.os = os_name();
    report.kernel = kernel_name();
    report.cpu = cpu_summary();
    report.hwloc = topology_summary();
    LibraryProbe nccl = probe_nccl(env);
    report.nccl = nccl.version ? fmt::format("{} ({})", *nccl.version, nccl.path) : nccl.error;
    LibraryProbe cuda = probe_cuda_driver();
    report.cuda_driver = cuda.version ? fmt::format("CUDA {} ({})", *cuda.version, cuda.path) : cuda.error;
    report.env = env;
    std::cout << render_report(report);
    return 0;
  }
  std::vector<Check> checks = run_checks(gather_host_facts(env, options));
  if (options.json)
    std::cout << checks_to_json(checks) << "\n";
  else
    std::cout << render_checks(checks);
  return any_failed(checks) ? 1 : 0;
}

}  // namespace ringrun
