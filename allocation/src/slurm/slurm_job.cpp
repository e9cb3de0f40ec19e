// The allocation of a running job, asked from slurmctld through libslurm, so that
// `ringrun --jobid N --dry-run` can plan from a login node, outside the job.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include <ringrun/variable_read.hpp>
#include "ringrun/slurm.hpp"

#if RINGRUN_HAVE_LIBSLURM
#include <dlfcn.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <unistd.h>
#endif

namespace ringrun {

#if RINGRUN_HAVE_LIBSLURM
namespace {

// libslurm, loaded when --jobid needs it: linked, it costs every launch ~1.2 ms (it and
// libresolv mapped and relocated) for one flag. RINGRUN_LIBSLURM_SONAME is the soname of the
// libslurm this was built against (the structures below are that version's).
struct Libslurm {
  decltype(&::slurm_init) init = nullptr;
  decltype(&::slurm_load_job) load_job = nullptr;
  decltype(&::slurm_free_job_info_msg) free_job_info_msg = nullptr;
  decltype(&::slurm_strerror) strerror = nullptr;
  decltype(&::slurm_job_cpus_allocated_on_node_id) cpus_allocated_on_node_id = nullptr;
};

const Libslurm& libslurm(const std::string& job_id) {
  static const Libslurm loaded = [&job_id] {
    void* handle = ::dlopen(RINGRUN_LIBSLURM_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (!handle)
      throw InputError(fmt::format("--jobid {} : cannot load {} ({}); install Slurm's library (Debian: "
                                   "libslurm38) or run ringrun inside the job",
                                   job_id, RINGRUN_LIBSLURM_SONAME, ::dlerror()));
    Libslurm lib;
    auto bind = [handle, &job_id](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(::dlsym(handle, name));
      if (!function)
        throw InputError(fmt::format("--jobid {} : {} has no {}; rebuild ringrun against this cluster's libslurm",
                                     job_id, RINGRUN_LIBSLURM_SONAME, name));
    };
    bind(lib.init, "slurm_init");
    bind(lib.load_job, "slurm_load_job");
    bind(lib.free_job_info_msg, "slurm_free_job_info_msg");
    bind(lib.strerror, "slurm_strerror");
    bind(lib.cpus_allocated_on_node_id, "slurm_job_cpus_allocated_on_node_id");
    lib.init(nullptr);  // reads the configuration once per process
    return lib;
  }();
  return loaded;
}

// RINGRUN_MAX_HOSTLIST bounds this expansion as it bounds the one from SLURM's environment.
Environment limit_env() {
  Environment env;
  if (auto v = variables::read_set(variables::kMaxHostlist)) env.emplace(variables::kMaxHostlist.name, *v);
  return env;
}

// GPU indexes of one node from a gres_detail_str entry: "gpu:4(IDX:0-3)", "gpu:a100:2(IDX:0,2)",
// several GRES separated by ','. Empty when the node has no GPU.
std::vector<std::string> gpu_indexes(std::string_view detail) {
  std::vector<std::string> ids;
  std::size_t pos = 0;
  while ((pos = detail.find("gpu", pos)) != detail.npos) {
    const auto idx = detail.find("(IDX:", pos);
    if (idx == detail.npos) break;
    const auto close = detail.find(')', idx);
    if (close == detail.npos) break;
    const std::string_view list = detail.substr(idx + 5, close - idx - 5);
    if (list != "N/A") {
      // The same "N" / "N-M" items as a hostlist bracket.
      for (const auto& n : expand_hostlist(fmt::format("g[{}]", list), 65536, "gres_detail_str"))
        ids.push_back(n.substr(1));
    }
    pos = close;
  }
  return ids;
}

// libslurm does not export job_state_string(); the base states of enum job_states.
std::string state_name(std::uint32_t state) {
  static constexpr std::array<std::string_view, 12> names{
      "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED",
      "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
  const auto base = state & JOB_STATE_BASE;
  return base < names.size() ? std::string(names[base]) : fmt::format("in state {}", base);
}

}  // namespace

Allocation allocation_from_job(const std::string& job_id) {
  std::uint32_t id = 0;
  const auto [end, ec] = std::from_chars(job_id.data(), job_id.data() + job_id.size(), id);
  if (ec != std::errc{} || end != job_id.data() + job_id.size() || id == 0)
    throw InputError(fmt::format("--jobid '{}' : expected a numeric job id like 1234", job_id));

  // libslurm 22.05 retries a missing configuration for 60 s and then exits the process, so look
  // first. (Configless clusters, found through DNS SRV, need SLURM_CONF or the file here.)
  const char* conf = std::getenv("SLURM_CONF");
  const std::string conf_path = conf && *conf ? conf : "/etc/slurm/slurm.conf";
  if (access(conf_path.c_str(), R_OK) != 0)
    throw InputError(fmt::format("--jobid {} : cannot read the Slurm configuration {} ({}); set SLURM_CONF to "
                                 "the cluster's slurm.conf",
                                 job_id, conf && *conf ? fmt::format("SLURM_CONF={}", conf_path) : conf_path,
                                 std::strerror(errno)));
  const Libslurm& slurm = libslurm(job_id);
  job_info_msg_t* raw = nullptr;
  if (slurm.load_job(&raw, id, SHOW_DETAIL) != SLURM_SUCCESS) {
    const int err = errno;
    throw InputError(fmt::format("--jobid {} : slurmctld refused: {}; check the id with squeue",
                                 job_id, slurm.strerror(err)));
  }
  const std::unique_ptr<job_info_msg_t, void (*)(job_info_msg_t*)> msg(raw, slurm.free_job_info_msg);
  if (msg->record_count == 0)
    throw InputError(fmt::format("--jobid {} : no such job; check the id with squeue", job_id));
  const slurm_job_info_t& job = msg->job_array[0];
  if ((job.job_state & JOB_STATE_BASE) != JOB_RUNNING || job.nodes == nullptr)
    throw InputError(fmt::format("--jobid {} : the job is {}, not running; wait until squeue shows R",
                                 job_id, state_name(job.job_state)));

  Allocation alloc;
  alloc.source = AllocationSource::slurm_job;
  alloc.explicit_slots = true;
  alloc.job_id = job_id;
  if (job.num_tasks > 0 && job.num_tasks != NO_VAL) alloc.ntasks = static_cast<int>(job.num_tasks);

  const auto names = expand_hostlist(job.nodes, max_hostlist_names(limit_env()), fmt::format("job {} nodes", job_id));
  const int cpus_per_task = (job.cpus_per_task == 0 || job.cpus_per_task == NO_VAL16) ? 1 : job.cpus_per_task;
  const bool tasks_per_node_set = job.ntasks_per_node != 0 && job.ntasks_per_node != NO_VAL16 &&
                                  job.ntasks_per_node != INFINITE16;
  int tasks_left = alloc.ntasks.value_or(0);
  for (std::size_t i = 0; i < names.size(); ++i) {
    HostSlots host;
    host.name = names[i];
    // Slots as Slurm lays tasks out in block order: what the node's allocated CPUs hold, capped
    // by --ntasks-per-node and by the tasks not yet placed (the SLURM_TASKS_PER_NODE of the job).
    int cpus = job.job_resrcs ? slurm.cpus_allocated_on_node_id(job.job_resrcs, static_cast<int>(i)) : 0;
    int slots = cpus > 0 ? cpus / cpus_per_task : 1;
    if (tasks_per_node_set) slots = std::min<int>(slots, job.ntasks_per_node);
    if (alloc.ntasks) {
      // Leave at least one task for each later node, as Slurm does.
      const int later_nodes = static_cast<int>(names.size() - i - 1);
      slots = std::max(1, std::min(slots, tasks_left - later_nodes));
      tasks_left -= slots;
    }
    host.slots = std::max(slots, 1);
    if (job.gres_detail_str && i < job.gres_detail_cnt && job.gres_detail_str[i])
      host.gpus = gpu_indexes(job.gres_detail_str[i]);
    alloc.hosts.push_back(std::move(host));
  }
  return alloc;
}

#else

Allocation allocation_from_job(const std::string&) {
  throw InputError("--jobid needs libslurm; rebuild with libslurm-dev");
}

#endif

}  // namespace ringrun
