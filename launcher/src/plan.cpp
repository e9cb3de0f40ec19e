#include <ringrun/plan.hpp>

#include "device_env.hpp"
#include "json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
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

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> split_on(std::string_view s, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == separator) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Would NCCL, given NCCL_SOCKET_IFNAME=`value`, use interface `name`? The value is a comma list of
// prefixes; a leading '^' makes it an exclude list, then a leading '=' makes the names exact.
bool socket_ifname_selects(std::string_view value, std::string_view name) {
  bool exclude = false;
  if (!value.empty() && value[0] == '^') {
    exclude = true;
    value.remove_prefix(1);
  }
  bool exact = false;
  if (!value.empty() && value[0] == '=') {
    exact = true;
    value.remove_prefix(1);
  }
  bool listed = false;
  for (const std::string& item : split_on(value, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : starts_with(name, item)) listed = true;
  }
  return exclude ? !listed : listed;
}

// The NCCL algorithm names the version accepts (nullopt: every name any version accepts).
std::vector<std::string> nccl_algorithms(std::optional<int> version) {
  auto at_least = [&](int major, int minor) { return !version || *version >= nccl_version_code(major, minor, 0); };
  std::vector<std::string> names = {"Ring", "Tree"};
  if (!version || *version < nccl_version_code(2, 14, 0)) names.push_back("Collnet");
  if (at_least(2, 14)) names.insert(names.end(), {"CollnetDirect", "CollnetChain"});
  if (at_least(2, 17)) names.push_back("NVLS");
  if (at_least(2, 18)) names.push_back("NVLSTree");
  if (at_least(2, 23)) names.push_back("PAT");
  return names;
}

const std::vector<std::string> kNcclProtocols = {"LL", "LL128", "Simple"};

// Checks each name of a comma list (after an optional '^') against `accepted`, case-insensitively.
void check_names(std::string_view option, std::string_view whole, std::string_view list,
                 const std::vector<std::string>& accepted, std::string_view accepted_by) {
  if (!list.empty() && list[0] == '^') list.remove_prefix(1);
  for (const std::string& name : split_on(list, ',')) {
    bool known = std::any_of(accepted.begin(), accepted.end(), [&](const std::string& a) { return lower(a) == lower(name); });
    if (!known)
      throw InputError(fmt::format("{} '{}' : '{}' is not a name {} accepts; use a comma list of {} (optionally "
                                   "after ^ to exclude)",
                                   option, whole, name, accepted_by, fmt::join(accepted, ", ")));
  }
}

std::string accepted_by(std::optional<int> version) {
  return version ? fmt::format("NCCL {}", format_nccl_version(*version)) : std::string("any NCCL version");
}

// -x NAME=VALUE wins over ringrun's own environment for what the ranks get.
std::optional<std::string> user_value(const std::map<std::string, std::string>& user_env, const Environment& launcher_env,
                                      const std::string& name) {
  if (auto it = user_env.find(name); it != user_env.end()) return it->second;
  if (auto it = launcher_env.find(name); it != launcher_env.end()) return it->second;
  return std::nullopt;
}

std::string user_source(const std::map<std::string, std::string>& user_env, const std::string& name) {
  return user_env.count(name) ? "by -x" : "in the environment";
}

// The one-line warnings for the user's own NCCL_* variables that contradict ringrun's options.
std::vector<std::string> nccl_contradictions(const LaunchOptions& opt, const std::map<std::string, std::string>& user_env,
                                             const Environment& launcher_env) {
  std::vector<std::string> warnings;
  auto value_of = [&](const std::string& name) { return user_value(user_env, launcher_env, name); };
  if (opt.nccl.tcp) {
    if (auto v = value_of("NCCL_IB_DISABLE"); v && *v != "1")
      warnings.push_back(fmt::format("ringrun: warning: --tcp sets NCCL_IB_DISABLE=1 but NCCL_IB_DISABLE={} is set {}; "
                                     "the ranks keep {} (NCCL may still use InfiniBand); unset it or drop --tcp",
                                     *v, user_source(user_env, "NCCL_IB_DISABLE"), *v));
  }
  if (auto v = value_of("NCCL_SOCKET_IFNAME")) {
    if (opt.network_interface && !socket_ifname_selects(*v, *opt.network_interface))
      warnings.push_back(fmt::format("ringrun: warning: --network-interface {} but NCCL_SOCKET_IFNAME={} set {} does "
                                     "not select {}; NCCL follows NCCL_SOCKET_IFNAME; unset it or make it ={}",
                                     *opt.network_interface, *v, user_source(user_env, "NCCL_SOCKET_IFNAME"),
                                     *opt.network_interface, *opt.network_interface));
    if (!v->empty() && (*v)[0] == '^' && socket_ifname_selects(*v, "lo"))
      warnings.push_back(fmt::format("ringrun: warning: NCCL_SOCKET_IFNAME={} set {} excludes some interfaces but not "
                                     "lo, so NCCL may pick lo; write NCCL_SOCKET_IFNAME={},lo or name one (=eth0)",
                                     *v, user_source(user_env, "NCCL_SOCKET_IFNAME"), *v));
  }
  auto compare = [&](const char* option, const std::optional<std::string>& given, const std::string& name) {
    if (!given) return;
    if (auto v = value_of(name); v && lower(*v) != lower(*given))
      warnings.push_back(fmt::format("ringrun: warning: {} {} but {}={} is set {}; the ranks keep {}; unset it or drop "
                                     "{}",
                                     option, *given, name, *v, user_source(user_env, name), *v, option));
  };
  compare("--nccl-algo", opt.nccl.algo, "NCCL_ALGO");
  compare("--nccl-proto", opt.nccl.proto, "NCCL_PROTO");
  if (opt.nccl.ib_gid_index && *opt.nccl.ib_gid_index != "auto")
    compare("--nccl-ib-gid-index", opt.nccl.ib_gid_index, "NCCL_IB_GID_INDEX");
  return warnings;
}

bool is_non_negative_integer(std::string_view s) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return !s.empty() && ec == std::errc() && ptr == s.data() + s.size() && value >= 0;
}

// Every rank's PYTHONPATH: the package folder before ringrun's own PYTHONPATH, or after the
// user's -x PYTHONPATH (see make_plan); nullopt without a package folder. An empty value gets no
// ':' (an empty entry would put the current directory on the path).
std::optional<std::string> rank_python_path(const std::optional<std::string>& package_dir,
                                            const std::map<std::string, std::string>& user_env,
                                            const Environment& launcher_env) {
  if (!package_dir) return std::nullopt;
  const auto by_user = user_env.find("PYTHONPATH");
  const auto inherited = launcher_env.find("PYTHONPATH");
  const bool user_chose = by_user != user_env.end();
  const std::string current = user_chose ? by_user->second
                              : inherited != launcher_env.end() ? inherited->second
                                                                : std::string();
  if (current.empty()) return *package_dir;
  for (const std::string& entry : split_on(current, ':'))
    if (entry == *package_dir) return current;
  return user_chose ? current + ":" + *package_dir : *package_dir + ":" + current;
}

}  // namespace

std::optional<InterfaceChoice> choose_network_interface(const std::vector<NetworkInterface>& interfaces,
                                                        const std::vector<std::string>& topology_netdevs) {
  auto excluded = [](const std::string& name) {
    return name == "lo" || starts_with(name, "docker") || starts_with(name, "veth") || starts_with(name, "virbr");
  };
  std::vector<const NetworkInterface*> usable;
  for (const NetworkInterface& i : interfaces)
    if (i.up && i.has_ipv4 && !excluded(i.name)) usable.push_back(&i);
  for (const NetworkInterface* i : usable)
    if (starts_with(i->name, "ib"))
      return InterfaceChoice{i->name, "an IPoIB interface (ib*), which NCCL also prefers"};
  for (const std::string& netdev : topology_netdevs)
    for (const NetworkInterface* i : usable)
      if (i->name == netdev)
        return InterfaceChoice{i->name, "the netdev of the NIC the topology chose for the ranks"};
  if (!usable.empty())
    return InterfaceChoice{usable.front()->name, "the first interface that is up with an IPv4 address (not lo, "
                                                 "docker*, veth*, virbr*)"};
  return std::nullopt;
}

std::string format_nccl_version(int code) {
  if (code < 10000) return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
}

void validate_nccl_algo(const std::string& list, std::optional<int> nccl_version) {
  const std::vector<std::string> accepted = nccl_algorithms(nccl_version);
  if (list.empty())
    throw InputError(fmt::format("--nccl-algo '' : give a comma list of {}", fmt::join(accepted, ", ")));
  const bool per_function = list.find(';') != std::string::npos || list.find(':') != std::string::npos;
  if (per_function && nccl_version && *nccl_version < nccl_version_code(2, 24, 0))
    throw InputError(fmt::format("--nccl-algo '{}' : the per-function form (';', 'func:') needs NCCL 2.24 or newer, "
                                 "found {}; give one comma list",
                                 list, format_nccl_version(*nccl_version)));
  for (const std::string& part : split_on(list, ';')) {
    auto colon = part.find(':');
    check_names("--nccl-algo", list, colon == std::string::npos ? part : part.substr(colon + 1), accepted,
                accepted_by(nccl_version));
  }
}

void validate_nccl_proto(const std::string& list) {
  check_names("--nccl-proto", list, list, kNcclProtocols, "NCCL");
}

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

  if (opt.nccl.algo) validate_nccl_algo(*opt.nccl.algo, in.nccl_version);
  if (opt.nccl.proto) validate_nccl_proto(*opt.nccl.proto);
  if (opt.nccl.ib_gid_index && *opt.nccl.ib_gid_index != "auto" && !is_non_negative_integer(*opt.nccl.ib_gid_index))
    throw InputError(fmt::format("--nccl-ib-gid-index '{}' : give auto (the RoCE v2 IPv4 GID found in sysfs) or an "
                                 "index 0, 1, ...",
                                 *opt.nccl.ib_gid_index));
  if (opt.mem_bind_local && !opt.node.bind)
    throw InputError("--mem-bind local with --bind none : memory follows the cores a rank is bound to; drop one of them");

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

  plan.warnings = nccl_contradictions(opt, user_env, in.launcher_env);

  // The interface for NCCL_SOCKET_IFNAME: the user's, else the launcher's choice, which every
  // node's task shim then receives as RINGRUN_NETWORK_INTERFACE (nodes do not choose on their own,
  // so they cannot disagree; whether every node has it is not probed).
  std::optional<std::string> interface = opt.network_interface;
  if (opt.network_interface) {
    plan.notes.push_back(fmt::format("ringrun: network interface {}: given by --network-interface", *interface));
  } else if (in.chosen_interface) {
    interface = in.chosen_interface->name;
    plan.notes.push_back(fmt::format("ringrun: network interface {}: {}", *interface, in.chosen_interface->reason));
  } else {
    plan.notes.push_back("ringrun: network interface: none chosen (no interface up with a routable IPv4 address "
                         "besides lo, docker*, veth*, virbr*); NCCL chooses");
  }
  const bool pass_interface = opt.network_interface || (interface && plan.launcher != LauncherKind::local);
  plan.notes.push_back(in.nccl_version ? fmt::format("ringrun: NCCL {} found (libnccl.so.2)",
                                                     format_nccl_version(*in.nccl_version))
                                       : std::string("ringrun: NCCL not found (libnccl.so.2); NCCL_IB_GID_INDEX is "
                                                     "reported, not set, unless --nccl-ib-gid-index is given"));
  const bool old_nccl = in.nccl_version && *in.nccl_version < nccl_version_code(2, 21, 0);
  const std::optional<std::string> python_path = rank_python_path(in.python_package_dir, user_env, in.launcher_env);
  std::set<std::string> reported_ports;

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
      r.numa_nodes = slot.numa_nodes;

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
      if (interface) {
        if (pass_interface) env["RINGRUN_NETWORK_INTERFACE"] = *interface;
        if (!user_sets("NCCL_SOCKET_IFNAME")) env["NCCL_SOCKET_IFNAME"] = "=" + *interface;
      }
      if (opt.fusion_threshold_mb) env["RINGRUN_FUSION_THRESHOLD_MB"] = format_seconds(*opt.fusion_threshold_mb);
      if (opt.cycle_time_ms) env["RINGRUN_CYCLE_TIME_MS"] = format_seconds(*opt.cycle_time_ms);
      if (opt.timeline_filename) env["RINGRUN_TIMELINE_FILENAME"] = *opt.timeline_filename;
      if (opt.timeline_mark_cycles) env["RINGRUN_TIMELINE_MARK_CYCLES"] = "1";
      if (opt.cache_capacity) env["RINGRUN_CACHE_CAPACITY"] = std::to_string(*opt.cache_capacity);
      if (opt.stall_check_warning_s)
        env["RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS"] = format_seconds(*opt.stall_check_warning_s);
      if (opt.stall_check_shutdown_s)
        env["RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS"] = format_seconds(*opt.stall_check_shutdown_s);
      if (r.gpu) set_device_variables(*r.gpu, slot.gpu_vendor, user_sets, env);
      // One OpenMP thread per core the rank owns; unpinned ranks sharing a host get 1 (torchrun's
      // rule), so N ranks do not each start a thread per core of the whole machine.
      if (!user_sets("OMP_NUM_THREADS")) {
        if (!r.cpus.empty()) env["OMP_NUM_THREADS"] = std::to_string(r.cpus.size());
        else if (local_size > 1) env["OMP_NUM_THREADS"] = "1";
      }
      // The slot's NCCL variables, unless the user set the same variable (theirs wins). With --tcp
      // the HCA is not used.
      for (const auto& [k, v] : slot.env)
        if (!user_sets(k) && !(opt.nccl.tcp && k == "NCCL_IB_HCA")) env[k] = v;
      if (opt.mem_bind_local) {
        env["RINGRUN_MEM_BIND"] = "local";
        // What the local backend's child binds to; the task shim binds with hwloc from its cpus.
        if (!r.numa_nodes.empty())
          env["RINGRUN_MEM_BIND_NODES"] =
              topology::format_cpulist(std::vector<unsigned>(r.numa_nodes.begin(), r.numa_nodes.end()));
      }
      if (opt.nccl.tcp) {
        env["RINGRUN_TCP"] = "1";
        if (!user_sets("NCCL_IB_DISABLE")) env["NCCL_IB_DISABLE"] = "1";
      }
      if (opt.nccl.algo) {
        env["RINGRUN_NCCL_ALGO"] = *opt.nccl.algo;
        if (!user_sets("NCCL_ALGO")) env["NCCL_ALGO"] = *opt.nccl.algo;
      }
      if (opt.nccl.proto) {
        env["RINGRUN_NCCL_PROTO"] = *opt.nccl.proto;
        if (!user_sets("NCCL_PROTO")) env["NCCL_PROTO"] = *opt.nccl.proto;
      }
      if (opt.nccl.ib_gid_index) env["RINGRUN_NCCL_IB_GID_INDEX"] = *opt.nccl.ib_gid_index;
      // NCCL_IB_GID_INDEX: always reported; set when asked, or for NCCL older than 2.21, whose
      // default (0) is the RoCE v1 GID on most RoCE ports.
      if (auto hca = slot.env.find("NCCL_IB_HCA"); hca != slot.env.end() && !opt.nccl.tcp) {
        const std::string port = hca->second.substr(hca->second.front() == '=' ? 1 : 0);
        if (auto it = in.roce_gid_indexes.find(port); it != in.roce_gid_indexes.end()) r.roce_gid_index = it->second;
        std::optional<std::string> value;
        std::string why;
        if (opt.nccl.ib_gid_index && *opt.nccl.ib_gid_index != "auto") {
          value = *opt.nccl.ib_gid_index;
          why = "given by --nccl-ib-gid-index";
        } else if (opt.nccl.ib_gid_index || old_nccl) {
          if (r.roce_gid_index) value = std::to_string(*r.roce_gid_index);
          why = opt.nccl.ib_gid_index ? "asked by --nccl-ib-gid-index auto" : "NCCL older than 2.21 defaults to 0";
        } else {
          why = in.nccl_version ? "NCCL 2.21 and newer choose it themselves" : "NCCL's version is unknown";
        }
        if (value && user_sets("NCCL_IB_GID_INDEX")) {
          why = "NCCL_IB_GID_INDEX is set by the user";
          value.reset();
        }
        if (value) env["NCCL_IB_GID_INDEX"] = *value;
        if (reported_ports.insert(r.host + " " + port).second)
          plan.notes.push_back(fmt::format(
              "ringrun: {} {}: RoCE v2 IPv4 GID index {}; NCCL_IB_GID_INDEX {} ({})", r.host, port,
              r.roce_gid_index ? std::to_string(*r.roce_gid_index) : "none (InfiniBand, or no such GID in sysfs)",
              value ? "=" + *value : "not set", why));
      }
      for (const auto& [k, v] : user_env) env[k] = v;
      if (python_path) env["PYTHONPATH"] = *python_path;
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
                       "\"cross_size\": {}, \"gpu\": {}, \"cpus\": {}, \"nic\": {}, \"roce_gid_index\": {}, "
                       "\"env\": {{",
                       r.rank, json::quote(r.host), r.local_rank, r.local_size, r.cross_rank, r.cross_size,
                       r.gpu ? json::quote(*r.gpu) : "null",
                       r.cpus.empty() ? "null" : json::quote(topology::format_cpulist(r.cpus)),
                       r.nic ? json::quote(*r.nic) : "null",
                       r.roce_gid_index ? std::to_string(*r.roce_gid_index) : "null");
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
  std::string out = fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {:<10} {:>7} {}\n", "rank", "host", "local",
                                "cross", "gpu", "cpus", "nic", "gid_idx", "nccl");
  for (const RankSlot& r : plan.ranks) {
    std::vector<std::string> nccl;
    for (const auto& [k, v] : r.env)
      if (starts_with(k, "NCCL_")) nccl.push_back(k + "=" + v);
    out += fmt::format("{:>5} {:<16} {:>5} {:>5} {:<6} {:<16} {:<10} {:>7} {}\n", r.rank, r.host, r.local_rank,
                       r.cross_rank, r.gpu.value_or("-"), r.cpus.empty() ? "-" : topology::format_cpulist(r.cpus),
                       r.nic.value_or("-"), r.roce_gid_index ? std::to_string(*r.roce_gid_index) : "-",
                       nccl.empty() ? "-" : fmt::format("{}", fmt::join(nccl, " ")));
  }
  return out;
}

}  // namespace ringrun
