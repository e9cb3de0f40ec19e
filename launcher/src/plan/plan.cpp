#include <ringrun/plan.hpp>

#include "common/subprocess.hpp"
#include "plan/device_env.hpp"
#include "plan/text.hpp"

#include <ringrun/environment_variables.hpp>
#include <ringrun/json.hpp>

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
bool fixed_by_plan(std::string_view name) {
  const variables::Variable* v = variables::find(name);
  return v && v->fixed_by_plan;
}

std::string allocation_name(const Allocation& a) {
  switch (a.source) {
    case AllocationSource::hosts_flag: return "-H";
    case AllocationSource::hostfile: return "--hostfile";
    case AllocationSource::discovery_script: return "--host-discovery-script";
    case AllocationSource::slurm_env:
    case AllocationSource::slurm_job: return "the SLURM allocation";
    case AllocationSource::mpijob: return "the MPIJob hostfile";
    case AllocationSource::pod: return "PET_NNODES x PET_NPROC_PER_NODE";
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
  for (const std::string& entry : text::split_on(current, ':'))
    if (entry == *package_dir) return current;
  return user_chose ? current + ":" + *package_dir : *package_dir + ":" + current;
}

// Every rank's PATH when ringrun lives in a virtualenv: its bin/ first, before the user's -x PATH
// or ringrun's own; nullopt without a virtualenv, or when that PATH starts with it already (an
// activated environment).
std::optional<std::string> rank_virtualenv_path(const std::optional<std::string>& virtualenv,
                                                const std::map<std::string, std::string>& user_env,
                                                const Environment& launcher_env) {
  if (!virtualenv) return std::nullopt;
  const std::string bin = *virtualenv + "/bin";
  const auto by_user = user_env.find("PATH");
  const auto inherited = launcher_env.find("PATH");
  const std::string current = by_user != user_env.end() ? by_user->second
                              : inherited != launcher_env.end() ? inherited->second
                                                                : std::string(kDefaultPath);
  if (current == bin || current.starts_with(bin + ":")) return std::nullopt;
  return bin + ":" + current;
}

}  // namespace

std::optional<InterfaceChoice> choose_network_interface(const std::vector<NetworkInterface>& interfaces,
                                                        const std::vector<std::string>& topology_netdevs) {
  auto excluded = [](const std::string& name) {
    return name == "lo" || name.starts_with("docker") || name.starts_with("veth") || name.starts_with("virbr");
  };
  std::vector<const NetworkInterface*> usable;
  for (const NetworkInterface& i : interfaces)
    if (i.up && i.has_ipv4 && !excluded(i.name)) usable.push_back(&i);
  for (const NetworkInterface* i : usable)
    if (i->name.starts_with("ib"))
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

const char* to_string(LauncherKind k) {
  switch (k) {
    case LauncherKind::automatic: return "auto";
    case LauncherKind::local: return "local";
    case LauncherKind::srun: return "srun";
    case LauncherKind::mpirun: return "mpirun";
    case LauncherKind::pod: return "pod";
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

namespace {

// What make_plan works out once and every rank's environment uses.
struct PlanContext {
  PlanContext(const PlanInputs& inputs, const LaunchOptions& options, std::map<std::string, std::string> user)
      : in(inputs), opt(options), user_env(std::move(user)) {}
  const PlanInputs& in;
  const LaunchOptions& opt;
  std::map<std::string, std::string> user_env;  // -x, resolved
  std::optional<std::string> interface;
  bool pass_interface = false;
  bool old_nccl = false;
  std::optional<std::string> python_path;
  std::optional<std::string> virtualenv_path;

  bool user_sets(const std::string& name) const {
    return user_env.count(name) > 0 || in.launcher_env.count(name) > 0;
  }
};

// The network interface for NCCL_SOCKET_IFNAME (the user's, else the launcher's choice, which every
// node's task shim then receives as RINGRUN_NETWORK_INTERFACE: nodes do not choose on their own,
// so they cannot disagree; whether every node has it is not probed), and the notes saying why.
std::vector<std::string> interface_notes(PlanContext& c, LauncherKind launcher) {
  std::vector<std::string> notes;
  c.interface = c.opt.network_interface;
  if (c.opt.network_interface) {
    notes.push_back(fmt::format("ringrun: network interface {}: given by --network-interface", *c.interface));
  } else if (c.in.chosen_interface) {
    c.interface = c.in.chosen_interface->name;
    notes.push_back(fmt::format("ringrun: network interface {}: {}", *c.interface, c.in.chosen_interface->reason));
  } else {
    notes.push_back("ringrun: network interface: none chosen (no interface up with a routable IPv4 address "
                    "besides lo, docker*, veth*, virbr*); NCCL chooses");
  }
  c.pass_interface = c.opt.network_interface || (c.interface && launcher != LauncherKind::local);
  notes.push_back(c.in.nccl_version ? fmt::format("ringrun: NCCL {} found (libnccl.so.2)",
                                                  format_nccl_version(*c.in.nccl_version))
                                    : std::string("ringrun: NCCL not found (libnccl.so.2); NCCL_IB_GID_INDEX is "
                                                  "reported, not set, unless --nccl-ib-gid-index is given"));
  return notes;
}

// -x: NAME=VALUE sets, NAME copies ringrun's own value.
std::map<std::string, std::string> resolve_user_env(const PlanInputs& in, const LaunchOptions& opt) {
  std::map<std::string, std::string> user_env;
  for (const std::string& arg : opt.env_args) {
    auto eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    if (!valid_env_name(name))
      throw InputError(fmt::format("-x '{}' : '{}' is not a variable name (write -x NAME or -x NAME=VALUE)", arg, name));
    if (fixed_by_plan(name))
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
  return user_env;
}

// The variables every rank gets alike, in the order of precedence make_plan has always applied:
// the job's own before the slot's, then the options that win over a slot's, -x, PYTHONPATH.
SharedEnvironment shared_environment(const PlanContext& c, const Plan& plan) {
  const LaunchOptions& opt = c.opt;
  SharedEnvironment shared;
  auto& env = shared.defaults;
  // The world's size under every name that carries it (ringrun's, torch.distributed's env://).
  for (const variables::Variable* v : variables::kAll)
    if (v->carries == variables::Carries::size) env[v->name] = std::to_string(plan.world_size);
  env[variables::kStoreAddr.name] = c.in.store_addr;
  env[variables::kJobSecret.name] = c.in.job_secret;
  env[variables::kStartTimeout.name] = format_seconds(plan.start_timeout_s);
  env[variables::kMasterAddr.name] = c.in.master_addr;
  env[variables::kMasterPort.name] = std::to_string(c.in.master_port);
  if (c.interface) {
    if (c.pass_interface) env[variables::kNetworkInterface.name] = *c.interface;
    if (!c.user_sets("NCCL_SOCKET_IFNAME")) env["NCCL_SOCKET_IFNAME"] = "=" + *c.interface;
  }
  if (opt.fusion_threshold_mb) env[variables::kFusionThresholdMb.name] = format_seconds(*opt.fusion_threshold_mb);
  if (opt.cycle_time_ms) env[variables::kCycleTimeMs.name] = format_seconds(*opt.cycle_time_ms);
  if (opt.timeline_filename) env[variables::kTimelineFilename.name] = *opt.timeline_filename;
  if (opt.timeline_mark_cycles) env[variables::kTimelineMarkCycles.name] = "1";
  if (opt.cache_capacity) env[variables::kCacheCapacity.name] = std::to_string(*opt.cache_capacity);
  if (opt.stall_check_warning_s)
    env[variables::kStallCheckWarningTimeSeconds.name] = format_seconds(*opt.stall_check_warning_s);
  if (opt.stall_check_shutdown_s)
    env[variables::kStallCheckShutdownTimeSeconds.name] = format_seconds(*opt.stall_check_shutdown_s);

  auto& over = shared.overrides;
  if (opt.mem_bind_local) over[variables::kMemBind.name] = "local";
  if (opt.nccl.tcp) {
    over[variables::kTcp.name] = "1";
    if (!c.user_sets("NCCL_IB_DISABLE")) over["NCCL_IB_DISABLE"] = "1";
  }
  if (opt.nccl.algo) {
    over[variables::kNcclAlgo.name] = *opt.nccl.algo;
    if (!c.user_sets("NCCL_ALGO")) over["NCCL_ALGO"] = *opt.nccl.algo;
  }
  if (opt.nccl.proto) {
    over[variables::kNcclProto.name] = *opt.nccl.proto;
    if (!c.user_sets("NCCL_PROTO")) over["NCCL_PROTO"] = *opt.nccl.proto;
  }
  if (opt.nccl.ib_gid_index) over[variables::kNcclIbGidIndex.name] = *opt.nccl.ib_gid_index;
  for (const auto& [k, v] : c.user_env) over[k] = v;
  if (c.python_path) over["PYTHONPATH"] = *c.python_path;
  if (c.virtualenv_path) {
    over["PATH"] = *c.virtualenv_path;
    over["VIRTUAL_ENV"] = *c.in.virtualenv;
  }
  for (const auto& [k, v] : over) env.erase(k);
  return shared;
}

// NCCL_IB_GID_INDEX for a slot whose HCA port is `hca` (the NCCL_IB_HCA value): always reported
// (a note per host and port); set when asked, or for NCCL older than 2.21, whose default (0) is
// the RoCE v1 GID on most RoCE ports.
void set_gid_index(const PlanContext& c, const std::string& hca, RankSlot& r, EnvironmentMap& env, Plan& plan,
                   std::set<std::string>& reported_ports) {
  const LaunchOptions& opt = c.opt;
  const std::string port = hca.substr(hca.front() == '=' ? 1 : 0);
  if (auto it = c.in.roce_gid_indexes.find(port); it != c.in.roce_gid_indexes.end()) r.roce_gid_index = it->second;
  std::optional<std::string> value;
  std::string why;
  if (opt.nccl.ib_gid_index && *opt.nccl.ib_gid_index != "auto") {
    value = *opt.nccl.ib_gid_index;
    why = "given by --nccl-ib-gid-index";
  } else if (opt.nccl.ib_gid_index || c.old_nccl) {
    if (r.roce_gid_index) value = std::to_string(*r.roce_gid_index);
    why = opt.nccl.ib_gid_index ? "asked by --nccl-ib-gid-index auto" : "NCCL older than 2.21 defaults to 0";
  } else {
    why = c.in.nccl_version ? "NCCL 2.21 and newer choose it themselves" : "NCCL's version is unknown";
  }
  if (value && c.user_sets("NCCL_IB_GID_INDEX")) {
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

// The variables of the rank's slot (its GPU, cores, NIC), less those the shared overrides replace.
EnvironmentMap slot_environment(const PlanContext& c, const topology::LocalSlot& slot, RankSlot& r, Plan& plan,
                                const SharedEnvironment& shared, std::set<std::string>& reported_ports) {
  const LaunchOptions& opt = c.opt;
  EnvironmentMap env;
  auto user_sets = [&c](const std::string& name) { return c.user_sets(name); };
  if (r.gpu) set_device_variables(*r.gpu, slot.gpu_vendor, user_sets, env);
  // One OpenMP thread per core the rank owns; unpinned ranks sharing a host get 1 (torchrun's
  // rule), so N ranks do not each start a thread per core of the whole machine.
  if (!c.user_sets("OMP_NUM_THREADS")) {
    if (!r.cpus.empty()) env["OMP_NUM_THREADS"] = std::to_string(r.cpus.size());
    else if (r.local_size > 1) env["OMP_NUM_THREADS"] = "1";
  }
  // The slot's NCCL variables, unless the user set the same variable (theirs wins). With --tcp
  // the HCA is not used.
  for (const auto& [k, v] : slot.env)
    if (!c.user_sets(k) && !(opt.nccl.tcp && k == "NCCL_IB_HCA")) env[k] = v;
  // What the local backend's child binds to; the task shim binds with hwloc from its cpus.
  if (opt.mem_bind_local && !r.numa_nodes.empty())
    env[variables::kMemBindNodes.name] =
        topology::format_cpulist(std::vector<unsigned>(r.numa_nodes.begin(), r.numa_nodes.end()));
  if (auto hca = slot.env.find("NCCL_IB_HCA"); hca != slot.env.end() && !opt.nccl.tcp)
    set_gid_index(c, hca->second, r, env, plan, reported_ports);
  for (const auto& [k, v] : shared.overrides) env.erase(k);
  return env;
}

// The slot variables of local rank l on the host planned last: the next host with a like slot
// reuses them without building a map (what a 4,096-node plan of identical nodes spends most on).
struct SlotMemo {
  topology::LocalSlot slot;
  int local_size = 0;
  std::shared_ptr<const EnvironmentMap> env;
};

// Whether a slot's variables are those of `memo`: the same inputs to slot_environment, and none
// that is per host (the HCA's GID index and its note).
bool same_slot_variables(const SlotMemo& memo, const topology::LocalSlot& slot, int local_size) {
  return memo.env && memo.local_size == local_size && memo.slot.gpu == slot.gpu &&
         memo.slot.gpu_vendor == slot.gpu_vendor && memo.slot.cpus.size() == slot.cpus.size() &&
         memo.slot.numa_nodes == slot.numa_nodes && memo.slot.env == slot.env && !slot.env.count("NCCL_IB_HCA");
}

struct PlanState {
  std::vector<int> hosts_with_local;  // cross size of each local rank
  std::vector<int> next_cross;        // the next cross rank of each local rank
  std::shared_ptr<const SharedEnvironment> shared;
  std::map<EnvironmentMap, std::shared_ptr<const EnvironmentMap>> interned;
  std::vector<SlotMemo> memo;  // by local rank
  std::set<std::string> reported_ports;
};

std::shared_ptr<const EnvironmentMap> slot_variables(const PlanContext& c, const topology::LocalSlot& slot,
                                                     RankSlot& r, Plan& plan, PlanState& state) {
  SlotMemo& memo = state.memo[static_cast<std::size_t>(r.local_rank)];
  if (same_slot_variables(memo, slot, r.local_size)) return memo.env;
  EnvironmentMap slot_env = slot_environment(c, slot, r, plan, *state.shared, state.reported_ports);
  // Ranks in like slots (the same GPU, cores and NIC on every node) share one copy.
  auto found = state.interned.find(slot_env);
  if (found == state.interned.end()) {
    auto copy = std::make_shared<const EnvironmentMap>(slot_env);
    found = state.interned.emplace(std::move(slot_env), std::move(copy)).first;
  }
  memo = SlotMemo{slot, r.local_size, found->second};
  return found->second;
}

// The ranks of one host, appended to plan.ranks.
void plan_host(const PlanContext& c, std::size_t h, int local_size, PlanState& state, Plan& plan) {
  const HostSlots& host = c.in.allocation.hosts[h];
  plan.hosts.push_back(host.name);
  std::vector<topology::LocalSlot> slots;
  if (c.in.node_layout) {
    try {
      slots = c.in.node_layout(h, local_size);
    } catch (const std::invalid_argument& e) {
      throw InputError(fmt::format("host {}: {}", host.name, e.what()));
    }
  } else {
    slots.resize(static_cast<std::size_t>(local_size));
    if (c.opt.node.gpus_per_rank > 0 && !host.gpus.empty()) {
      if (static_cast<std::size_t>(local_size) > host.gpus.size())
        throw InputError(fmt::format("host {}: {} ranks but {} GPUs ({}); lower -np or pass --gpus-per-rank 0",
                                     host.name, local_size, host.gpus.size(), fmt::join(host.gpus, ",")));
      for (int l = 0; l < local_size; ++l) slots[static_cast<std::size_t>(l)].gpu = host.gpus[static_cast<std::size_t>(l)];
    }
  }
  for (int l = 0; l < local_size; ++l) {
    topology::LocalSlot& slot = slots[static_cast<std::size_t>(l)];
    RankSlot& r = plan.ranks.emplace_back();
    r.rank = static_cast<int>(plan.ranks.size() - 1);
    r.host = host.name;
    r.host_index = plan.hosts.size() - 1;
    r.local_rank = l;
    r.local_size = local_size;
    r.cross_rank = state.next_cross[static_cast<std::size_t>(l)]++;
    r.cross_size = state.hosts_with_local[static_cast<std::size_t>(l)];
    r.gpu = slot.gpu;
    r.cpus = slot.cpus;
    r.nic = slot.nic;
    r.numa_nodes = slot.numa_nodes;
    auto slot_env = slot_variables(c, slot, r, plan, state);
    r.env = RankEnvironment(RankIdentity{r.rank, r.local_rank, r.local_size, r.cross_rank, r.cross_size,
                                         r.host_index, r.host},
                            state.shared, std::move(slot_env));
  }
}

}  // namespace

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

  PlanContext c(in, opt, resolve_user_env(in, opt));
  plan.warnings = nccl_contradictions(opt.nccl, opt.network_interface, c.user_env, in.launcher_env);
  plan.notes = interface_notes(c, plan.launcher);
  c.old_nccl = in.nccl_version && *in.nccl_version < nccl_version_code(2, 21, 0);
  c.python_path = rank_python_path(in.python_package_dir, c.user_env, in.launcher_env);
  c.virtualenv_path = rank_virtualenv_path(in.virtualenv, c.user_env, in.launcher_env);
  PlanState state;
  state.shared = std::make_shared<const SharedEnvironment>(shared_environment(c, plan));

  std::vector<int> counts = ranks_per_host(alloc, world_size);
  // cross rank: index among the hosts that hold this local rank; cross size: how many do.
  const auto max_local = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
  state.hosts_with_local.assign(max_local, 0);
  for (int n : counts)
    for (int l = 0; l < n; ++l) ++state.hosts_with_local[static_cast<std::size_t>(l)];
  state.next_cross.assign(max_local, 0);
  state.memo.resize(max_local);
  plan.ranks.reserve(static_cast<std::size_t>(world_size));
  for (std::size_t h = 0; h < alloc.hosts.size(); ++h)
    if (counts[h] > 0) plan_host(c, h, counts[h], state, plan);
  return plan;
}

}  // namespace ringrun
