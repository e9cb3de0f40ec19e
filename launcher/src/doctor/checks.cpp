// `ringrun doctor`'s host checks as pure functions of gathered facts: the SLURM allocation, the
// launchers, the libraries and GPUs, and run_checks (every check in report order); the transport
// checks (RDMA, memlock, /dev/shm, the network interface) are in doctor/transports.cpp.
#include "doctor/checks.hpp"

#include <ringrun/environment_variables.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ringrun::diagnostics {

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

namespace {

constexpr const char* kUneditedSlurmFix =
    "run ringrun from the shell salloc/sbatch started, with the SLURM_* variables unedited";

// Tasks vs GPUs on each node whose GPUs are known.
Check check_tasks_vs_gpus(const Allocation& allocation) {
  std::vector<std::string> overfull, idle;
  int nodes_with_gpus = 0, fewest_gpus = 0;
  for (const auto& host : allocation.hosts) {
    if (host.gpus.empty() || host.slots <= 0) continue;
    int gpus = static_cast<int>(host.gpus.size());
    fewest_gpus = nodes_with_gpus == 0 ? gpus : std::min(fewest_gpus, gpus);
    ++nodes_with_gpus;
    if (host.slots > gpus)
      overfull.push_back(fmt::format("{} has {} tasks but {} GPUs", host.name, host.slots, gpus));
    else if (host.slots < gpus && allocation.ntasks)
      idle.push_back(fmt::format("{} has {} tasks for {} GPUs", host.name, host.slots, gpus));
  }
  if (nodes_with_gpus == 0)
    return pass("tasks vs GPUs",
                "not compared: the allocation names no GPUs (ranks run CPU-only unless "
                "CUDA_VISIBLE_DEVICES says otherwise)");
  if (!overfull.empty())
    return fail("tasks vs GPUs", fmt::format("{} (one GPU per rank)", join(overfull)),
                fmt::format("request --ntasks-per-node={} (or more GPUs per node), or run CPU-only ranks "
                            "with --gpus-per-rank 0",
                            fewest_gpus));
  if (!idle.empty())
    return warn("tasks vs GPUs", fmt::format("{}: some GPUs stay idle", join(idle)),
                fmt::format("request --ntasks-per-node={} to use every GPU", fewest_gpus));
  return pass("tasks vs GPUs", fmt::format("{} node(s) with GPUs, no more tasks than GPUs on any", nodes_with_gpus));
}

// SLURM's GPU list (SLURM_STEP_GPUS, else SLURM_JOB_GPUS) vs CUDA_VISIBLE_DEVICES.
Check check_gpu_lists(const Environment& env) {
  std::string list_name = lookup(env, "SLURM_STEP_GPUS") ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS";
  auto slurm_gpus = lookup(env, list_name);
  auto cuda_visible = lookup(env, "CUDA_VISIBLE_DEVICES");
  if (!slurm_gpus || !cuda_visible)
    return pass("GPU lists", fmt::format("not compared: {} unset", !slurm_gpus ? "SLURM_STEP_GPUS and SLURM_JOB_GPUS are"
                                                                               : "CUDA_VISIBLE_DEVICES is"));
  auto slurm_list = split_commas(*slurm_gpus);
  auto cuda_list = split_commas(*cuda_visible);
  if (*cuda_visible == "NoDevFiles" || slurm_list.size() != cuda_list.size())
    return fail("GPU lists",
                fmt::format("{}='{}' names {} GPU(s) but CUDA_VISIBLE_DEVICES='{}' names {}", list_name, *slurm_gpus,
                            slurm_list.size(), *cuda_visible, *cuda_visible == "NoDevFiles" ? 0 : cuda_list.size()),
                "do not set CUDA_VISIBLE_DEVICES in the job script; request the GPUs with "
                "--gpus-per-node and let Slurm set it");
  return pass("GPU lists", fmt::format("{}='{}' and CUDA_VISIBLE_DEVICES='{}' name {} GPU(s) each", list_name,
                                       *slurm_gpus, *cuda_visible, slurm_list.size()));
}

// Duplicate hostnames in the expanded node list; nullopt when no node list is set.
std::optional<Check> check_nodelist_hostnames(const Environment& env, const Allocation& allocation) {
  std::string nodelist_name = allocation.inside_step && lookup(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST"
                              : lookup(env, "SLURM_JOB_NODELIST")                          ? "SLURM_JOB_NODELIST"
                                                                                           : "SLURM_NODELIST";
  auto nodelist = lookup(env, nodelist_name);
  if (!nodelist) return std::nullopt;
  try {
    return check_duplicate_hostnames(expand_hostlist(*nodelist, max_hostlist_names(env), nodelist_name),
                                     nodelist_name);
  } catch (const InputError& e) {
    return fail("duplicate hostnames", e.what(), kUneditedSlurmFix);
  }
}

}  // namespace

std::vector<Check> check_slurm(const Environment& env) {
  auto job_id = slurm_job_id(env);
  if (!job_id)
    return {pass("slurm allocation",
                 "none (SLURM_JOB_ID unset): ringrun starts ranks on this host, or on -H/--hostfile hosts")};
  std::optional<Allocation> allocation;
  try {
    allocation = allocation_from_slurm_env(env);
  } catch (const InputError& e) {
    return {fail("slurm allocation", e.what(), kUneditedSlurmFix)};
  }
  if (!allocation || allocation->hosts.empty())
    return {fail("slurm allocation", fmt::format("job {} but no node list (SLURM_JOB_NODELIST unset)", *job_id),
                 kUneditedSlurmFix)};
  std::vector<Check> checks;
  checks.push_back(pass("slurm allocation", fmt::format("job {}{}: {} node(s), {} task slot(s)", *job_id,
                                                        allocation->inside_step ? " (inside a step)" : "",
                                                        allocation->hosts.size(), allocation->total_slots())));
  checks.push_back(check_tasks_vs_gpus(*allocation));
  checks.push_back(check_gpu_lists(env));
  if (auto duplicates = check_nodelist_hostnames(env, *allocation)) checks.push_back(std::move(*duplicates));
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
              fmt::format("pip install nvidia-nccl-cu13 into the job's environment (nvidia-nccl-cu12 beside a CUDA 12 "
                          "torch), or set {} to a libnccl.so.2",
                          variables::kNcclLibrary.name));
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

// The transport checks (check_rdma ... check_nccl_socket_ifname) are in doctor/transports.cpp.

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
  if (facts.pod_job)
    for (auto& check : check_pod_job(*facts.pod_job)) checks.push_back(std::move(check));
  if (facts.python) checks.push_back(check_python_binding(*facts.python));
  return checks;
}

bool any_failed(const std::vector<Check>& checks) {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.status == Status::fail; });
}

}  // namespace ringrun::diagnostics
