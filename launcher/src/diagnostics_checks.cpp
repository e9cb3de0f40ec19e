// The pure half of the diagnostics: checks from gathered facts, and their renderings.
#include "diagnostics.hpp"

#include "json.hpp"

#include <ringrun/slurm.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

namespace ringrun::diagnostics {
namespace {

std::optional<std::string> lookup(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) items.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

std::string join(const std::vector<std::string>& items, std::string_view separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

Check pass(std::string name, std::string detail) { return {std::move(name), Status::pass, std::move(detail), ""}; }
Check warn(std::string name, std::string detail, std::string fix) {
  return {std::move(name), Status::warn, std::move(detail), std::move(fix)};
}
Check fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), Status::fail, std::move(detail), std::move(fix)};
}

std::optional<std::string> slurm_job_id(const Environment& env) {
  if (auto id = lookup(env, "SLURM_JOB_ID")) return id;
  return lookup(env, "SLURM_JOBID");
}

// The allocation when SLURM's variables parse; nullopt outside a job or when malformed.
std::optional<Allocation> parsed_allocation(const Environment& env) {
  try {
    return allocation_from_slurm_env(env);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// "2.21.5" >= 2.21?
bool version_at_least(const std::string& version, int major, int minor) {
  int found_major = 0, found_minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &found_major, &found_minor) != 2) return false;
  return found_major > major || (found_major == major && found_minor >= minor);
}

}  // namespace

const char* to_string(Status status) {
  switch (status) {
    case Status::pass:
      return "PASS";
    case Status::warn:
      return "WARN";
    case Status::fail:
      return "FAIL";
  }
  return "?";
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
  if (bytes >= kTiB) return fmt::format("{:.1f} TiB", static_cast<double>(bytes) / kTiB);
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / kGiB);
  if (bytes >= kMiB) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes >= kKiB) return fmt::format("{} KiB", bytes / kKiB);
  return fmt::format("{} B", bytes);
}

std::string nccl_version_string(int code) {
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

std::string cuda_version_string(int code) { return fmt::format("{}.{}", code / 1000, (code % 1000) / 10); }

// ---- SLURM ------------------------------------------------------------------------------------

Check check_duplicate_hostnames(const std::vector<std::string>& hosts, std::string_view what) {
  std::map<std::string, int> counts;
  for (const auto& host : hosts) ++counts[host];
  std::vector<std::string> repeated;
  for (const auto& [host, count] : counts)
    if (count > 1) repeated.push_back(fmt::format("{} ({}x)", host, count));
  if (repeated.empty())
    return pass("duplicate hostnames", fmt::format("none among {} hosts of {}", hosts.size(), what));
  return fail("duplicate hostnames", fmt::format("{} names {} more than once", what, join(repeated)),
              "give every node a unique hostname: ranks on nodes sharing a name are taken for one node "
              "(shared memory and CUDA IPC across hosts fail)");
}

std::vector<Check> check_slurm(const Environment& env) {
  std::vector<Check> checks;
  auto job_id = slurm_job_id(env);
  if (!job_id) {
    checks.push_back(pass("slurm allocation",
                          "none (SLURM_JOB_ID unset): ringrun starts ranks on this host, or on -H/--hostfile hosts"));
    return checks;
  }
  std::optional<Allocation> allocation;
  try {
    allocation = allocation_from_slurm_env(env);
  } catch (const InputError& e) {
    checks.push_back(fail("slurm allocation", e.what(),
                          "run ringrun from the shell salloc/sbatch started, with the SLURM_* variables unedited"));
    return checks;
  }
  if (!allocation || allocation->hosts.empty()) {
    checks.push_back(fail("slurm allocation",
                          fmt::format("job {} but no node list (SLURM_JOB_NODELIST unset)", *job_id),
                          "run ringrun from the shell salloc/sbatch started, with the SLURM_* variables unedited"));
    return checks;
  }
  checks.push_back(pass("slurm allocation", fmt::format("job {}{}: {} node(s), {} task slot(s)", *job_id,
                                                        allocation->inside_step ? " (inside a step)" : "",
                                                        allocation->hosts.size(), allocation->total_slots())));

  // Tasks vs GPUs on each node whose GPUs are known.
  std::vector<std::string> overfull, idle;
  int nodes_with_gpus = 0, fewest_gpus = 0;
  for (const auto& host : allocation->hosts) {
    if (host.gpus.empty() || host.slots <= 0) continue;
    int gpus = static_cast<int>(host.gpus.size());
    fewest_gpus = nodes_with_gpus == 0 ? gpus : std::min(fewest_gpus, gpus);
    ++nodes_with_gpus;
    if (host.slots > gpus)
      overfull.push_back(fmt::format("{} has {} tasks but {} GPUs", host.name, host.slots, gpus));
    else if (host.slots < gpus && allocation->ntasks)
      idle.push_back(fmt::format("{} has {} tasks for {} GPUs", host.name, host.slots, gpus));
  }
  if (nodes_with_gpus == 0) {
    checks.push_back(pass("tasks vs GPUs",
                          "not compared: the allocation names no GPUs (ranks run CPU-only unless "
                          "CUDA_VISIBLE_DEVICES says otherwise)"));
  } else if (!overfull.empty()) {
    checks.push_back(fail("tasks vs GPUs", fmt::format("{} (one GPU per rank)", join(overfull)),
                          fmt::format("request --ntasks-per-node={} (or more GPUs per node), or run CPU-only ranks "
                                      "with --gpus-per-rank 0",
                                      fewest_gpus)));
  } else if (!idle.empty()) {
    checks.push_back(warn("tasks vs GPUs", fmt::format("{}: some GPUs stay idle", join(idle)),
                          fmt::format("request --ntasks-per-node={} to use every GPU", fewest_gpus)));
  } else {
    checks.push_back(
        pass("tasks vs GPUs", fmt::format("{} node(s) with GPUs, no more tasks than GPUs on any", nodes_with_gpus)));
  }

  // SLURM's GPU list vs CUDA_VISIBLE_DEVICES.
  std::string list_name = lookup(env, "SLURM_STEP_GPUS") ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS";
  auto slurm_gpus = lookup(env, list_name);
  auto cuda_visible = lookup(env, "CUDA_VISIBLE_DEVICES");
  if (!slurm_gpus || !cuda_visible) {
    checks.push_back(
        pass("GPU lists", fmt::format("not compared: {} unset", !slurm_gpus ? "SLURM_STEP_GPUS and SLURM_JOB_GPUS are"
                                                                            : "CUDA_VISIBLE_DEVICES is")));
  } else {
    auto slurm_list = split_commas(*slurm_gpus);
    auto cuda_list = split_commas(*cuda_visible);
    if (*cuda_visible == "NoDevFiles" || slurm_list.size() != cuda_list.size()) {
      checks.push_back(
          fail("GPU lists",
               fmt::format("{}='{}' names {} GPU(s) but CUDA_VISIBLE_DEVICES='{}' names {}", list_name, *slurm_gpus,
                           slurm_list.size(), *cuda_visible, *cuda_visible == "NoDevFiles" ? 0 : cuda_list.size()),
               "do not set CUDA_VISIBLE_DEVICES in the job script; request the GPUs with "
               "--gpus-per-node and let Slurm set it"));
    } else {
      checks.push_back(pass("GPU lists", fmt::format("{}='{}' and CUDA_VISIBLE_DEVICES='{}' name {} GPU(s) each",
                                                     list_name, *slurm_gpus, *cuda_visible, slurm_list.size())));
    }
  }

  // Duplicate hostnames in the expanded node list.
  std::string nodelist_name = allocation->inside_step && lookup(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST"
                              : lookup(env, "SLURM_JOB_NODELIST")                           ? "SLURM_JOB_NODELIST"
                                                                                            : "SLURM_NODELIST";
  if (auto nodelist = lookup(env, nodelist_name)) {
    try {
      checks.push_back(check_duplicate_hostnames(expand_hostlist(*nodelist, max_hostlist_names(env), nodelist_name), nodelist_name));
    } catch (const InputError& e) {
      checks.push_back(fail("duplicate hostnames", e.what(),
                            "run ringrun from the shell salloc/sbatch started, with the SLURM_* variables unedited"));
    }
  }
  return checks;
}

// ---- launchers --------------------------------------------------------------------------------

Check check_srun(const HostFacts& facts) {
  bool in_job = slurm_job_id(facts.env).has_value();
  if (facts.srun_path) return pass("srun", *facts.srun_path);
  if (in_job)
    return fail("srun", "not found in PATH inside SLURM job " + *slurm_job_id(facts.env),
                "add Slurm's bin directory to PATH, or start with --launcher mpirun");
  return pass("srun", "not found in PATH (needed only inside a SLURM allocation)");
}

Check check_pmix(const HostFacts& facts) {
  if (!facts.srun_path) return pass("pmix", "not checked: no srun");
  if (!facts.srun_mpi_list)
    return warn("pmix", "`srun --mpi=list` failed: " + facts.srun_mpi_list_error,
                "make Slurm's configuration reachable from this host (slurm.conf or the slurmctld DNS SRV record)");
  auto plugins = parse_srun_mpi_list(*facts.srun_mpi_list);
  bool has_pmix =
      std::any_of(plugins.begin(), plugins.end(), [](const std::string& p) { return p.rfind("pmix", 0) == 0; });
  if (has_pmix) return pass("pmix", "srun --mpi=list: " + join(plugins));
  return warn("pmix",
              plugins.empty() ? "srun --mpi=list lists no MPI plugin"
                              : "srun offers no pmix plugin (srun --mpi=list: " + join(plugins) + ")",
              "ranks bootstrap through ringrun's TCP store instead; for PMIx, build Slurm with --with-pmix");
}

Check check_mpirun(const HostFacts& facts) {
  bool in_job = slurm_job_id(facts.env).has_value();
  if (!facts.mpirun_path) {
    if (in_job) return pass("mpirun", "not found in PATH (srun is used inside the allocation)");
    return warn("mpirun", "not found in PATH: the mpirun backend (remote -H/--hostfile hosts) is unavailable",
                "install Open MPI (apt-get install openmpi-bin) or add its bin directory to PATH");
  }
  std::string version = facts.mpirun_version.value_or("version unknown");
  if (version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos)
    return pass("mpirun", fmt::format("{} ({})", version, *facts.mpirun_path));
  return warn("mpirun", fmt::format("{} is not Open MPI: {}", *facts.mpirun_path, version),
              "ringrun's mpirun backend speaks Open MPI's options; put Open MPI's mpirun first in PATH or use "
              "--launcher srun");
}

// ---- libraries and GPUs -----------------------------------------------------------------------

Check check_nccl(const HostFacts& facts) {
  if (facts.nccl.version) return pass("nccl", fmt::format("{} ({})", *facts.nccl.version, facts.nccl.path));
  if (facts.gpus_seen.value_or(0) == 0) return pass("nccl", "libnccl.so.2 not found (no GPUs here: not needed)");
  return warn("nccl", "libnccl.so.2 not loadable: " + facts.nccl.error,
              "install NCCL or add its lib directory to LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64)");
}

Check check_cuda_driver(const HostFacts& facts) {
  if (facts.cuda_driver.version)
    return pass("cuda driver", fmt::format("CUDA {} ({})", *facts.cuda_driver.version, facts.cuda_driver.path));
  if (facts.gpus_seen.value_or(0) == 0) return pass("cuda driver", "libcuda.so.1 not found (no GPUs here: not needed)");
  return fail(
      "cuda driver",
      fmt::format("{} GPU(s) seen but libcuda.so.1 not loadable: {}", *facts.gpus_seen, facts.cuda_driver.error),
      "install the NVIDIA driver (it provides libcuda.so.1) or add its directory to LD_LIBRARY_PATH");
}

Check check_gpu_count(const HostFacts& facts) {
  if (!facts.gpus_seen)
    return warn("gpu count", "hwloc could not read this host: " + facts.topology_error,
                "check that /sys is readable (containers: mount /sys) and hwloc is installed");
  int seen = *facts.gpus_seen;
  std::optional<int> allocated;
  if (auto allocation = parsed_allocation(facts.env)) {
    std::string node = lookup(facts.env, "SLURMD_NODENAME").value_or(facts.hostname);
    for (const auto& host : allocation->hosts)
      if (host.name == node && !host.gpus.empty()) allocated = static_cast<int>(host.gpus.size());
    if (!allocated && allocation->hosts.size() == 1 && !allocation->hosts[0].gpus.empty())
      allocated = static_cast<int>(allocation->hosts[0].gpus.size());
  }
  if (allocated && seen < *allocated)
    return fail(
        "gpu count", fmt::format("hwloc sees {} GPU(s) but the allocation gives this node {}", seen, *allocated),
        "check nvidia-smi and dmesg on this node (a GPU missing from the PCI bus?) and drain it if one is gone");
  if (allocated) return pass("gpu count", fmt::format("{} GPU(s) seen, {} allocated here", seen, *allocated));
  if (seen == 0) return pass("gpu count", "no GPUs seen: ranks run CPU-only (--gpus-per-rank 0)");
  return pass("gpu count", fmt::format("{} GPU(s) seen", seen));
}

// ---- network ----------------------------------------------------------------------------------

std::vector<Check> check_rdma(const HostFacts& facts) {
  std::vector<Check> checks;
  if (facts.rdma_ports.empty()) {
    auto allocation = parsed_allocation(facts.env);
    if (allocation && allocation->hosts.size() > 1)
      checks.push_back(warn("rdma devices", "none in /sys/class/infiniband: this multi-node job runs over TCP sockets",
                            "load the HCA drivers (e.g. modprobe mlx5_ib) if the nodes have IB/RoCE cards"));
    else
      checks.push_back(pass("rdma devices", "none in /sys/class/infiniband (TCP sockets between nodes)"));
    return checks;
  }
  for (const auto& port : facts.rdma_ports) {
    std::string name = fmt::format("rdma {}:{}", port.device, port.port);
    bool roce = port.link_layer == "Ethernet";
    std::string what =
        fmt::format("{}, {}{}", port.state, roce ? "RoCE (Ethernet)" : port.link_layer,
                    roce && port.roce_gid_index ? fmt::format(", GID index {}", *port.roce_gid_index) : "");
    if (port.state.find("ACTIVE") == std::string::npos)
      checks.push_back(warn(name, what + ": not ACTIVE",
                            fmt::format("check the cable and switch port (ibstat {}), or leave it out with "
                                        "NCCL_IB_HCA=^={}",
                                        port.device, port.device)));
    else if (roce && !port.roce_gid_index)
      checks.push_back(warn(
          name, what + ": no RoCE v2 GID with an IPv4 address",
          fmt::format("give the netdev of {} an IPv4 address (NCCL picks an IPv4-mapped RoCE v2 GID)", port.device)));
    else
      checks.push_back(pass(name, what));
  }
  if (auto gid_index = lookup(facts.env, "NCCL_IB_GID_INDEX")) {
    if (facts.nccl.version && version_at_least(*facts.nccl.version, 2, 21) && *gid_index != "-1") {
      checks.push_back(warn(
          "NCCL_IB_GID_INDEX",
          fmt::format("NCCL_IB_GID_INDEX={} is set but NCCL {} picks the GID itself", *gid_index, *facts.nccl.version),
          "unset NCCL_IB_GID_INDEX (NCCL's guide: do not set it with NCCL 2.21 and later)"));
    } else {
      for (const auto& port : facts.rdma_ports)
        if (port.roce_gid_index && std::to_string(*port.roce_gid_index) != *gid_index)
          checks.push_back(warn(
              "NCCL_IB_GID_INDEX",
              fmt::format("NCCL_IB_GID_INDEX={} but {} port {} has its RoCE v2 IPv4 GID at index {}", *gid_index,
                          port.device, port.port, *port.roce_gid_index),
              fmt::format("set NCCL_IB_GID_INDEX={} (or upgrade to NCCL >= 2.21 and unset it)", *port.roce_gid_index)));
    }
  }
  return checks;
}

Check check_memlock(std::optional<std::uint64_t> soft_limit_bytes, bool rdma_present) {
  if (!soft_limit_bytes) return pass("memlock", "unlimited");
  std::string limit = format_bytes(*soft_limit_bytes);
  if (!rdma_present) return pass("memlock", limit + " (no RDMA devices here: not needed)");
  return warn("memlock",
              fmt::format("locked-memory limit is {}: RDMA registration (ibv_reg_mr) fails beyond it", limit),
              "set '* soft memlock unlimited' and '* hard memlock unlimited' in /etc/security/limits.conf (and "
              "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf)");
}

Check check_shm(std::optional<std::uint64_t> total_bytes) {
  constexpr std::uint64_t kMinimum = 1ull << 30;
  if (!total_bytes)
    return warn("/dev/shm", "missing: the shared-memory transport is unavailable",
                "mount a tmpfs on /dev/shm (docker: --ipc=host), or set RINGRUN_DISABLE_SHM=1");
  if (*total_bytes < kMinimum)
    return warn(
        "/dev/shm",
        fmt::format("only {} (Docker's default is 64 MiB): shared-memory transfers may fail",
                    format_bytes(*total_bytes)),
        "docker run --shm-size=8g (or --ipc=host), or remount /dev/shm larger; RINGRUN_DISABLE_SHM=1 avoids it");
  return pass("/dev/shm", format_bytes(*total_bytes));
}

Check check_network_interface(const std::optional<std::string>& chosen, const std::vector<NetInterface>& interfaces) {
  std::vector<std::string> usable;
  for (const auto& iface : interfaces)
    if (!iface.loopback && iface.operstate == "up") usable.push_back(iface.name);
  std::string usable_text = usable.empty() ? "none" : join(usable);
  if (!chosen) {
    if (usable.empty())
      return warn("network interface", "none chosen, and no interface but loopback is up",
                  "bring an interface up (ip link set IF up); other nodes cannot reach this one");
    return pass("network interface", "none chosen (ringrun detects it); up and not loopback: " + usable_text);
  }
  auto it =
      std::find_if(interfaces.begin(), interfaces.end(), [&](const NetInterface& i) { return i.name == *chosen; });
  if (it == interfaces.end())
    return fail("network interface", fmt::format("'{}' does not exist in /sys/class/net", *chosen),
                fmt::format("pick an interface that is up: {}", usable_text));
  if (it->loopback)
    return fail("network interface", fmt::format("'{}' is loopback: other nodes cannot reach it", *chosen),
                fmt::format("pick an interface that is up: {}", usable_text));
  if (it->operstate == "down")
    return fail("network interface", fmt::format("'{}' is down", *chosen),
                fmt::format("ip link set {} up, or pick one that is up: {}", *chosen, usable_text));
  if (it->operstate != "up")
    return warn("network interface", fmt::format("'{}' has operstate '{}'", *chosen, it->operstate),
                fmt::format("check `ip link show {}`; interfaces that are up: {}", *chosen, usable_text));
  return pass("network interface", fmt::format("'{}' is up and not loopback", *chosen));
}

std::optional<Check> check_nccl_socket_ifname(const Environment& env) {
  auto value = lookup(env, "NCCL_SOCKET_IFNAME");
  if (!value || (*value)[0] != '^') return std::nullopt;
  std::string list = value->substr(1);
  if (!list.empty() && list[0] == '=') list.erase(0, 1);
  for (const auto& prefix : split_commas(list))
    if (prefix == "lo" || std::string("lo").rfind(prefix, 0) == 0)
      return pass("NCCL_SOCKET_IFNAME", "'" + *value + "' excludes lo");
  return warn("NCCL_SOCKET_IFNAME", fmt::format("'{}' excludes some interfaces but not lo: NCCL may pick lo", *value),
              fmt::format("set NCCL_SOCKET_IFNAME={},lo, or name the interface exactly (=eth0)", *value));
}

// ---- all checks -------------------------------------------------------------------------------

std::vector<Check> run_checks(const HostFacts& facts) {
  std::vector<Check> checks;
  checks.push_back(pass("hostname", facts.hostname));
  for (auto& check : check_slurm(facts.env)) checks.push_back(std::move(check));
  checks.push_back(check_srun(facts));
  checks.push_back(check_pmix(facts));
  checks.push_back(check_mpirun(facts));
  checks.push_back(check_nccl(facts));
  checks.push_back(check_cuda_driver(facts));
  checks.push_back(check_gpu_count(facts));
  for (auto& check : check_rdma(facts)) checks.push_back(std::move(check));
  checks.push_back(check_memlock(facts.memlock_soft_bytes, !facts.rdma_ports.empty()));
  checks.push_back(check_shm(facts.shm_total_bytes));
  checks.push_back(check_network_interface(facts.network_interface, facts.interfaces));
  if (auto check = check_nccl_socket_ifname(facts.env)) checks.push_back(std::move(*check));
  if (facts.python) checks.push_back(check_python_binding(*facts.python));
  return checks;
}

bool any_failed(const std::vector<Check>& checks) {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.status == Status::fail; });
}

// ---- renderings -------------------------------------------------------------------------------

namespace {
std::string render_rows(const std::vector<Check>& checks) {
  std::size_t width = 0;
  for (const auto& check : checks) width = std::max(width, check.name.size());
  std::string out;
  for (const auto& check : checks) {
    out += fmt::format("{}  {:<{}}  {}\n", to_string(check.status), check.name, width, check.detail);
    if (check.status != Status::pass && !check.fix.empty())
      out += fmt::format("      {:<{}}  fix: {}\n", "", width, check.fix);
  }
  return out;
}

std::string summary(const std::vector<Check>& checks) {
  int counts[3] = {0, 0, 0};
  for (const auto& check : checks) ++counts[static_cast<int>(check.status)];
  return fmt::format("{} checks: {} PASS, {} WARN, {} FAIL", checks.size(), counts[0], counts[1], counts[2]);
}
}  // namespace

std::string render_checks(const std::vector<Check>& checks) {
  return render_rows(checks) + "\nringrun doctor: " + summary(checks) + "\n";
}

std::string checks_to_json(const std::vector<Check>& checks) {
  std::string out = "[";
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const auto& check = checks[i];
    if (i) out += ", ";
    out += fmt::format("{{\"name\": {}, \"status\": {}, \"detail\": {}, \"fix\": {}}}", json::quote(check.name),
                       json::quote(to_string(check.status)), json::quote(check.detail), json::quote(check.fix));
  }
  return out + "]";
}

namespace {
// Reads the fixed shape checks_to_json writes: an array of objects with string values.
class CheckArrayReader {
 public:
  CheckArrayReader(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  std::vector<Check> read() {
    std::vector<Check> checks;
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return checks;
    }
    while (true) {
      checks.push_back(read_check());
      char c = next();
      if (c == ']') break;
      if (c != ',') error("expected ',' or ']'");
    }
    skip_space();
    if (pos_ != text_.size()) error("text after the array");
    return checks;
  }

 private:
  Check read_check() {
    Check check;
    bool has_status = false;
    expect('{');
    if (peek() == '}') error("empty object");
    while (true) {
      std::string key = read_string();
      expect(':');
      std::string value = read_string();
      if (key == "name")
        check.name = value;
      else if (key == "detail")
        check.detail = value;
      else if (key == "fix")
        check.fix = value;
      else if (key == "status") {
        has_status = true;
        if (value == "PASS")
          check.status = Status::pass;
        else if (value == "WARN")
          check.status = Status::warn;
        else if (value == "FAIL")
          check.status = Status::fail;
        else
          error("status '" + value + "' is not PASS, WARN or FAIL");
      }
      char c = next();
      if (c == '}') break;
      if (c != ',') error("expected ',' or '}'");
    }
    if (!has_status) error("an object without \"status\"");
    return check;
  }

  std::string read_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) error("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (pos_ + 4 > text_.size()) error("short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            char h = text_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9')
              code |= h - '0';
            else if (h >= 'a' && h <= 'f')
              code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              code |= h - 'A' + 10;
            else
              error("bad \\u escape");
          }
          if (code < 0x80)
            out += static_cast<char>(code);
          else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default:
          error(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  char next() {
    char c = peek();
    if (pos_ >= text_.size()) error("unexpected end");
    ++pos_;
    return c;
  }
  void expect(char wanted) {
    if (next() != wanted) error(fmt::format("expected '{}'", wanted));
  }
  [[noreturn]] void error(const std::string& what) {
    throw InputError(fmt::format("{}: not doctor --json output: {} at column {}", origin_, what, pos_ + 1));
  }

  std::string_view text_;
  std::string_view origin_;
  std::size_t pos_ = 0;
};
}  // namespace

std::vector<Check> checks_from_json(std::string_view text, std::string_view origin) {
  return CheckArrayReader(text, origin).read();
}

namespace {
// Hostname (from each node's "hostname" check) -> the nodes that report it, for names reported twice.
std::map<std::string, std::vector<std::string>> shared_hostnames(const std::vector<NodeChecks>& nodes) {
  std::map<std::string, std::vector<std::string>> nodes_by_hostname;
  for (const auto& node : nodes)
    for (const auto& check : node.checks)
      if (check.name == "hostname") nodes_by_hostname[check.detail].push_back(node.node);
  std::erase_if(nodes_by_hostname, [](const auto& entry) { return entry.second.size() < 2; });
  return nodes_by_hostname;
}
}  // namespace

bool any_node_failed(const std::vector<NodeChecks>& nodes) {
  return !shared_hostnames(nodes).empty() || std::any_of(nodes.begin(), nodes.end(), [](const NodeChecks& n) {
    return !n.error.empty() || any_failed(n.checks);
  });
}

std::string render_node_tables(const std::vector<NodeChecks>& nodes) {
  std::string out;
  std::vector<std::string> failing, warning;
  for (const auto& node : nodes) {
    out += fmt::format("== {} ==\n", node.node);
    if (!node.error.empty()) {
      out += fmt::format("FAIL  {}\n\n", node.error);
      failing.push_back(node.node);
      continue;
    }
    out += render_rows(node.checks);
    out += fmt::format("{}\n\n", summary(node.checks));
    if (any_failed(node.checks))
      failing.push_back(node.node);
    else if (std::any_of(node.checks.begin(), node.checks.end(),
                         [](const Check& c) { return c.status == Status::warn; }))
      warning.push_back(node.node);
  }
  auto shared = shared_hostnames(nodes);
  for (const auto& [hostname, names] : shared)
    out += fmt::format(
        "FAIL  nodes {} all report hostname '{}'\n      fix: give every node a unique hostname (ranks "
        "on nodes sharing a name are taken for one node)\n",
        join(names), hostname);
  if (failing.empty() && shared.empty())
    out += fmt::format("ringrun doctor --all-nodes: no FAIL on {} node(s){}\n", nodes.size(),
                       warning.empty() ? "" : "; WARN on " + join(warning));
  else if (failing.empty())
    out += "ringrun doctor --all-nodes: FAIL: nodes share a hostname\n";
  else
    out += fmt::format("ringrun doctor --all-nodes: FAIL on {}{}\n", join(failing),
                       shared.empty() ? "" : "; nodes share a hostname");
  return out;
}

// ---- report -----------------------------------------------------------------------------------

bool is_secret_name(std::string_view name) {
  std::string upper(name);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"SECRET", "TOKEN", "PASSWORD", "KEY"})
    if (upper.find(word) != std::string::npos) return true;
  return false;
}

bool is_reported_variable(std::string_view name) {
  for (std::string_view prefix : {"RINGRUN_", "SLURM_", "NCCL_", "CUDA_", "OMPI_", "PMIX_"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

std::string render_report(const ReportFacts& facts) {
  std::string out = "### ringrun environment report\n\n";
  out +=
      fmt::format("- ringrun: {}\n- OS: {}\n- Kernel: {}\n- CPU: {}\n- hwloc: {}\n- NCCL: {}\n- CUDA driver: {}\n",
                  facts.ringrun_version, facts.os, facts.kernel, facts.cpu, facts.hwloc, facts.nccl, facts.cuda_driver);
  out += "\nEnvironment (RINGRUN_*, SLURM_*, NCCL_*, CUDA_*, OMPI_*, PMIX_*; secrets redacted):\n\n```\n";
  int listed = 0;
  for (const auto& [name, value] : facts.env) {
    if (!is_reported_variable(name)) continue;
    out += fmt::format("{}={}\n", name, is_secret_name(name) ? "<redacted>" : value);
    ++listed;
  }
  if (listed == 0) out += "(none set)\n";
  return out + "```\n";
}

// ---- check-build ------------------------------------------------------------------------------

bool ompi_has_slurm_support(std::string_view ompi_info_output) {
  std::size_t pos = 0;
  while (pos < ompi_info_output.size()) {
    std::size_t end = ompi_info_output.find('\n', pos);
    if (end == std::string_view::npos) end = ompi_info_output.size();
    std::string_view line = ompi_info_output.substr(pos, end - pos);
    // "                 MCA ras: slurm (MCA v2.1.0, API v2.0.0, Component v4.1.4)"
    if (line.find("MCA ") != std::string_view::npos && line.find(": slurm ") != std::string_view::npos) return true;
    pos = end + 1;
  }
  return false;
}

std::string render_check_build(const BuildFacts& facts) {
  auto box = [](bool checked, const std::string& text) {
    return fmt::format("    [{}] {}\n", checked ? 'X' : ' ', text);
  };
  std::string out = fmt::format("ringrun v{}:\n\nAvailable APIs:\n", facts.version);
  if (facts.runtime_library) {
    out += box(true, "C (ringrun/ringrun.h, " + *facts.runtime_library + ")");
    out += box(true, "C++ (ringrun/runtime.hpp, the same library)");
  } else {
    out += box(false, "C: " + facts.runtime_library_error);
    out += box(false, "C++: " + facts.runtime_library_error);
  }
  const auto [python_ready, python_text] = python_binding_line(facts.python);
  out += box(python_ready, python_text);

  out += "\nAvailable launchers:\n";
  out += box(true, "local");
  if (!facts.srun_path)
    out += box(false, "srun: not found in PATH");
  else if (!facts.srun_mpi_list)
    // Outside an allocation srun cannot reach a controller; its fatal message would only confuse.
    out += box(true, fmt::format("srun ({}; PMIx support unknown until inside an allocation: `srun --mpi=list` "
                                 "needs a reachable SLURM controller)",
                                 *facts.srun_path));
  else
    out += box(true, fmt::format("srun ({}; MPI plugins: {})", *facts.srun_path,
                                 join(parse_srun_mpi_list(*facts.srun_mpi_list))));
  if (!facts.mpirun_path) {
    out += box(false, "mpirun: not found in PATH");
  } else {
    std::string version = facts.mpirun_version.value_or("`mpirun --version` failed");
    bool open_mpi = version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos;
    std::string slurm = !open_mpi          ? ""
                        : !facts.ompi_info ? "; SLURM support unknown: `ompi_info` failed"
                        : ompi_has_slurm_support(*facts.ompi_info)
                            ? "; SLURM support: yes"
                            : "; SLURM support: no (ompi_info lists no slurm component)";
    if (open_mpi)
      out += box(true, fmt::format("mpirun ({}; {}{})", *facts.mpirun_path, version, slurm));
    else
      out += box(false, fmt::format("mpirun: {} is not Open MPI ({}); the mpirun backend needs Open MPI",
                                    *facts.mpirun_path, version));
  }

  out += "\nAvailable transports:\n";
  out += box(true, "TCP");
  if (!facts.shm_total_bytes)
    out += box(false, "Shared memory: /dev/shm is missing (mount a tmpfs there)");
  else
    out += box(true, fmt::format("Shared memory (/dev/shm: {}, {} free)", format_bytes(*facts.shm_total_bytes),
                                 format_bytes(facts.shm_free_bytes.value_or(0))));
  std::string nccl_found = facts.nccl.version ? fmt::format("NCCL {} ({})", *facts.nccl.version, facts.nccl.path) : "";
  if (facts.runtime_has_nccl == false)
    out += box(false, fmt::format("NCCL: the runtime library was built without the NCCL transport (it names no nccl "
                                  "symbol); {}",
                                  facts.nccl.version ? "found " + nccl_found : facts.nccl.error));
  else if (facts.nccl.version)
    out += box(true, nccl_found);
  else
    out += box(false, "NCCL: " + facts.nccl.error);

  out += "\nTopology:\n";
  out += box(true, "hwloc " + facts.hwloc_version);
  if (!facts.gpus) {
    out += box(false, "GPUs: hwloc could not read this host: " + facts.topology_error);
    out += box(false, "NICs: hwloc could not read this host: " + facts.topology_error);
  } else {
    if (facts.gpus->empty())
      out += box(false, "GPUs: none seen by hwloc (no NVIDIA/AMD GPU on the PCI bus, or its driver is not loaded)");
    else
      out += box(true, fmt::format("GPUs: {} ({})", facts.gpus->size(), join(*facts.gpus)));
    if (facts.nics->empty())
      out += box(false, "NICs: none seen by hwloc (no IB/RoCE/EFA HCA or Ethernet NIC on the PCI bus)");
    else
      out += box(true, fmt::format("NICs: {} ({})", facts.nics->size(), join(*facts.nics)));
  }
  return out;
}

}  // namespace ringrun::diagnostics
