#include <ringrun/plan.hpp>

#include "json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace ringrun {
namespace {

// Variables the plan owns for each rank; -x may not override them, or ranks would disagree on
// who they are.
const std::set<std::string, std::less<>> kIdentityVariables = {
    "RINGRUN_RANK", "RINGRUN_SIZE", "RINGRUN_LOCAL_RANK", "RINGRUN_LOCAL_SIZE", "RINGRUN_CROSS_RANK",
    "RINGRUN_CROSS_SIZE", "RINGRUN_HOSTNAME", "RINGRUN_STORE_ADDR", "RINGRUN_JOB_SECRET", "RANK", "WORLD_SIZE",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"};

std::string allocation_name(const Allocation& a) {
  switch (a.source) {
    case AllocationSource::hosts_flag: return "-H";
    case AllocationSource::hostfile: return "--hostfile";
    case AllocationSource::slurm_env:
    case AllocationSource::slurm_job: return "the SLURM allocation";
    case AllocationSource::local: break;
  }
  return "the local host";
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Ranks per host in block order: fill each host's slots in turn; with --oversubscribe the ranks
// beyond the slots go one per host in turn, so the load stays as even as the slots allow.
std::vector<int> ranks_per_host(const Allocation& a, int world_size) {
  std::vector<int> counts(a.hosts.size(), 0);
  int left = world_size;
  for (std::size_t h = 0; h < a.hosts.size() && left > 0; ++h) {
    int take = a.explicit_slots ? std::min(a.hosts[h].slots, left) : left;
    counts[h] = take;
    left -= take;
  }
  for (std::size_t h = 0; left > 0; h = (h + 1) % a.hosts.size()) {
    ++counts[h];
    --left;
  }
  return counts;
}

std::string format_seconds(double s) {
  return fmt::format("{}", s);
}

}  // namespace

const char* to_string(LauncherKind k) {
  switch (k) {
    case LauncherKind::automatic: return "auto";
    case LauncherKind::local: return "local";
    case LauncherKind::srun: return "srun";
    case LauncherKind::mpirun: return "mpirun";
  }
  return "?";
}

int default_num_proc(const Allocation& allocation, int local_gpus) {
  if (allocation.source == AllocationSource::local) return std::max(1, local_gpus);
  if (allocation.ntasks && *allocation.ntasks > 0) return *allocation.ntasks;
  if (allocation.explicit_slots && allocation.source != AllocationSource::slurm_env &&
      allocation.source != AllocationSource::slurm_job)
    return allocation.total_slots();
  int gpus = 0;
  for (const auto& h : allocation.hosts) gpus += static_cast<int>(h.gpus.size());
  if (gpus > 0) return gpus;
  return std::max<int>(1, static_cast<int>(allocation.hosts.size()));
}

double default_start_timeout(std::size_t num_hosts) {
  return 30.0 + static_cast<double>(num_hosts / 8);
}

Plan make_plan(const PlanInputs& in, const LaunchOptions& opt) {
  const Allocation& alloc = in.allocation;
  if (alloc.hosts.empty()) throw InputError("the allocation has no hosts; give -H, --hostfile or run in a SLURM job");

  int world_size = opt.num_proc ? *opt.num_proc : default_num_proc(alloc, 0);
  if (world_size < 1)
    throw InputError(fmt::format("-np {} : the number of ranks must be at least 1", world_size));
  if (alloc.explicit_slots && world_size > alloc.total_slots() && !opt.oversubscribe)
    throw InputError(fmt::format("-np {} : more ranks than the {} slots of {}; lower -np, add slots or pass "
                                 "--oversubscribe",
                                 world_size, alloc.total_slots(), allocation_name(alloc)));

  Plan plan;
  plan.launcher = opt.launcher == LauncherKind::automatic ? LauncherKind::local : opt.launcher;
  plan.command = opt.program;
  plan.world_size = world_size;
  plan.start_timeout_s = opt.start_timeout_s ? *opt.start_timeout_s : default_start_timeout(alloc.hosts.size());
  if (plan.start_timeout_s <= 0)
    throw InputError(fmt::format("--start-timeout {} : the timeout must be positive seconds", plan.start_timeout_s));

  // -x: NAME=VALUE sets, NAME copies ringrun's own value.
  std::map<std::string, std::string> user_env;
  for (const std::string& arg : opt.env_args) {
    auto eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    if (!valid_env_name(name))
      throw InputError(fmt::format("-x '{}' : '{}' is not a variable name (write -x NAME or -x NAME=VALUE)", arg, name));
    if (kIdentityVariables.count(name))
      throw InputError(fmt::format("-x '{}' : {} is set by ringrun for each rank and cannot be overridden", arg, name));
    if (eq != std::string::npos) {
      user_env[name] = arg.substr(eq + 1);
    } else if (auto it = in.launcher_env.find(name); it != in.launcher_env.end()) {
      user_env[name] = it->second;
    } else {
      throw InputError(fmt::format("-x {} : {} is not set in ringrun's environment; give a value with -x {}=VALUE",
                                   name, name, name));
    }
  }
  auto user_sets = [&](const std::string& name) {
    return user_env.count(name) > 0 || in.launcher_env.count(name) > 0;
  };

  std::vector<int> counts = ranks_per_host(alloc, world_size);
  // cross rank: index among the hosts that hold this local rank; cross size: how many do.
  int max_local = *std::max_element(counts.begin(), counts.end());
  std::vector<int> hosts_with_local(static_cast<std::size_t>(max_local), 0);
  for (int c : counts)
    for (int l = 0; l < c; ++l) ++hosts_with_local[static_cast<std::size_t>(l)];

  std::vector<int> next_cross(static_cast<std::size_t>(max_local), 0);
  int rank = 0;
  for (std::size_t h = 0; h < alloc.hosts.size(); ++h) {
    int local_size = counts[h];
    if (local_size == 0) continue;
    const HostSlots& host = alloc.hosts[h];
    plan.hosts.push_back(host.name);

    std::vector<topology::LocalSlot> slots;
    if (in.node_layout) {
      try {
        slots = in.node_layout(h, local_size);
      } catch (const std::invalid_argument& e) {
        throw InputError(fmt::format("host {}: {}", host.name, e.what()));
      }
    } else {
      slots.resize(static_cast<std::size_t>(local_size));
      if (opt.node.gpus_per_rank > 0 && !host.gpus.empty()) {
        if (static_cast<std::size_t>(local_size) > host.gpus.size())
          throw InputError(fmt::format("host {}: {} ranks but {} GPUs ({}); lower -np or pass --gpus-per-rank 0",
                                       host.name, local_size, host.gpus.size(), fmt::join(host.gpus, ",")));
        for (int l = 0; l < local_size; ++l) slots[static_cast<std::size_t>(l)].gpu = host.gpus[static_cast<std::size_t>(l)];
      }
    }

    for (int l = 0; l < local_size; ++l, ++rank) {
      const topology::LocalSlot& slot = slots[static_cast<std::size_t>(l)];
      RankSlot r;
      r.rank = rank;
      r.host = host.name;
      r.host_index = plan.hosts.size() - 1;
      r.local_rank = l;
      r.local_size = local_size;
      r.cross_rank = next_cross[static_cast<std::size_t>(l)]++;
      r.cross_size = hosts_with_local[static_cast<std::size_t>(l)];
      r.gpu = slot.gpu;
      r.cpus = slot.cpus;
      r.nic = slot.nic;

      auto& env = r.env;
      env["RINGRUN_RANK"] = std::to_string(r.rank);
      env["RINGRUN_SIZE"] = std::to_string(world_size);
      env["RINGRUN_LOCAL_RANK"] = std::to_string(l);
      env["RINGRUN_LOCAL_SIZE"] = std::to_string(local_size);
      env["RINGRUN_CROSS_RANK"] = std::to_string(r.cross_rank);
      env["RINGRUN_CROSS_SIZE"] = std::to_string(r.cross_size);
      env["RINGRUN_HOSTNAME"] = host.name;
      env["RINGRUN_STORE_ADDR"] = in.store_addr;
      env["RINGRUN_JOB_SECRET"] = in.job_secret;
      env["RINGRUN_START_TIMEOUT"] = format_seconds(plan.start_timeout_s);
      // torch.distributed's env:// contract, so such scripts run unchanged.
      env["RANK"] = std::to_string(r.rank);
      env["WORLD_SIZE"] = std::to_string(world_size);
      env["LOCAL_RANK"] = std::to_string(l);
      env["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
      env["GROUP_RANK"] = std::to_string(r.host_index);
      env["MASTER_ADDR"] = in.master_addr;
      env["MASTER_PORT"] = std::to_string(in.master_port);
      if (opt.network_interface) {
        env["RINGRUN_NETWORK_INTERFACE"] = *opt.network_interface;
        if (!user_sets("NCCL_SOCKET_IFNAME")) env["NCCL_SOCKET_IFNAME"] = "=" + *opt.network_interface;
      }
      if (opt.fusion_threshold_mb) env["RINGRUN_FUSION_THRESHOLD_MB"] = format_seconds(*opt.fusion_threshold_mb);
      if (opt.cycle_time_ms) env["RINGRUN_CYCLE_TIME_MS"] = format_seconds(*opt.cycle_time_ms);
      if (opt.timeline_filename) env["RINGRUN_TIMELINE_FILENAME"] = *opt.timeline_filename;
      if (opt.stall_check_warning_s)
        env["RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS"] = format_seconds(*opt.stall_check_warning_s);
      if (opt.stall_check_shutdown_s)
        env["RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS"] = format_seconds(*opt.stall_check_shutdown_s);
      if (r.gpu) {
        env["CUDA_VISIBLE_DEVICES"] = *r.gpu;
        // The topology numbers GPUs in PCI bus order; CUDA's default order is "fastest first".
        if (!user_sets("CUDA_DEVICE_ORDER")) env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
      }
      // One OpenMP thread per core the rank owns; unpinned ranks sharing a host get 1 (torchrun's
      // rule), so N ranks do not each start a thread per core of the whole machine.
      if (!user_sets("OMP_NUM_THREADS")) {
        if (!r.cpus.empty()) env["OMP_NUM_THREADS"] = std::to_string(r.cpus.size());
        else if (local_size > 1) env["OMP_NUM_THREADS"] = "1";
      }
      // The slot's NCCL variables, unless the user set the same variable (theirs wins).
      for (const auto& [k, v] : slot.env)
        if (!user_sets(k)) env[k] = v;
      for (const auto& [k, v] : user_env) env[k] = v;
      plan.ranks.push_back(std::move(r));
    }
  }
  return plan;
}

std::string plan_to_json(const Plan& plan) {
  std::string out = "{";
  out += fmt::format("\"launcher\": {}, \"command\": {}, \"world_size\": {}, \"start_timeout\": {}, \"ranks\": [",
                     json::quote(to_string(plan.launcher)), json::string_array(plan.command), plan.world_size,
                     plan.start_timeout_s);
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    const RankSlot& r = plan.ranks[i];
    out += i ? ",\n  " : "\n  ";
    out += fmt::format("{{\"rank\": {}, \"host\": {}, \"local_rank\": {}, \"local_size\": {}, \"cross_rank\": {}, "
                       "\"cross_size\": {}, \"gpu\": {}, \"cpus\": {}, \"nic\": {}, \"env\": {{",
                       r.rank, json::quote(r.host), r.local_rank, r.local_size, r.cross_rank, r.cross_size,
                       r.gpu ? json::quote(*r.gpu) : "null",
                       r.cpus.empty() ? "null" : json::quote(topology::format_cpulist(r.cpus)),
                       r.nic ? json::quote(*r.nic) : "null");
    bool first = true;
    for (const auto& [k, v] : r.env) {
      if (!first) out += ", ";
      first = false;
      json::append_string(out, k);
      out += ": ";
      // The secret is per job and this job never starts; printing it would only teach people
      // to paste it.
      json::append_string(out, k == "RINGRUN_JOB_SECRET" ? "<redacted>" : v);
    }
    out += "}}";
  }
  out += "]}\n";
  return out;
}

std::string plan_to_table(const Plan& plan) {
  std::string out = fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {}\n", "rank", "host", "local", "cross", "gpu",
                                "cpus", "nic");
  for (const RankSlot& r : plan.ranks)
    out += fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {}\n", r.rank, r.host, r.local_rank, r.cross_rank,
                       r.gpu.value_or("-"), r.cpus.empty() ? "-" : topology::format_cpulist(r.cpus),
                       r.nic.value_or("-"));
  return out;
}

}  // namespace ringrun
