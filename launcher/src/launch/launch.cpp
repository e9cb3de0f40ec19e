#include <ringrun/launch.hpp>

#include "backend/table.hpp"
#include "common/subprocess.hpp"
#include "doctor/doctor.hpp"
#include "elastic/discovery.hpp"
#include "elastic/job.hpp"
#include "facts/cache.hpp"
#include "facts/interface_probe.hpp"
#include "facts/python_package.hpp"
#include "facts/srun.hpp"
#include "launch/elastic_start.hpp"
#include "launch/kubernetes.hpp"
#include "launch/mpi_programs.hpp"
#include "plan/device_env.hpp"

#include <ringrun/variable_read.hpp>
#include <ringrun/slurm.hpp>
#include <ringrun/store.hpp>
#include <ringrun/topology_cache.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

namespace ringrun {
namespace {

std::string local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// This host by name: its hostname, its short name, or a name under it (a pod's FQDN
// job-worker-0.job.default.svc for hostname job-worker-0: an MPIJob's launcher as a worker).
bool is_local_host(const std::string& host, const std::string& self) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1" || host == self) return true;
  auto dot = self.find('.');
  if (dot != std::string::npos && host == self.substr(0, dot)) return true;
  return dot == std::string::npos && host.size() > self.size() && host.starts_with(self) && host[self.size()] == '.';
}

std::string job_secret() {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw LaunchError(fmt::format("ringrun: getrandom: {}", std::strerror(errno)), 1);
    }
    got += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

// A port that was free a moment ago on this host (torchrun's --rdzv-endpoint=localhost:0 idea).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  constexpr int kFallback = static_cast<int>(variables::default_number(variables::kMasterPort));
  if (fd < 0) return kFallback;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  int port = kFallback;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

Allocation gather_allocation(const Invocation& inv, const Environment& env, const std::string& self,
                             const PodJob& job) {
  if (inv.hosts) return parse_hosts_flag(*inv.hosts);
  if (inv.hostfile) {
    std::ifstream in(*inv.hostfile);
    if (!in)
      throw InputError(fmt::format("--hostfile '{}' : cannot read it: {}", *inv.hostfile, std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    return parse_hostfile(text.str(), *inv.hostfile);
  }
  if (inv.job_id) return allocation_from_job(*inv.job_id);
  if (auto slurm = allocation_from_environment(env)) return *slurm;
  if (job.mpijob) return read_mpijob_hostfile(*job.mpijob);
  if (job.pod) {
    int gpus = 0;
    if (!job.pod->nproc_per_node) {
      // auto: the GPUs the ranks may use, as the plan will count them (CUDA_VISIBLE_DEVICES too).
      topology::NodeOptions node = inv.launch.node;
      inherit_visible_gpus(env, node);
      gpus = static_cast<int>(topology::usable_gpu_count(topology::load_live_cached(), node));
    }
    Allocation pods = pod_allocation(*job.pod, pod_ranks(*job.pod, gpus), self);
    if (inv.launch.num_proc && *inv.launch.num_proc != pods.total_slots())
      throw InputError(fmt::format("-np {} : a per-pod job has PET_NNODES x ranks per pod = {} ranks; leave -np out "
                                   "or set PET_NPROC_PER_NODE",
                                   *inv.launch.num_proc, pods.total_slots()));
    return pods;
  }
  Allocation local;
  local.source = AllocationSource::local;
  local.hosts.push_back(HostSlots{self, 0, {}});
  return local;
}

LauncherKind resolve_launcher(LauncherKind requested, const Allocation& alloc, const std::string& self) {
  bool all_local = true;
  for (const auto& h : alloc.hosts) all_local = all_local && is_local_host(h.name, self);
  if (requested == LauncherKind::local && !all_local) {
    for (const auto& h : alloc.hosts)
      if (!is_local_host(h.name, self))
        throw InputError(fmt::format("--launcher local starts ranks on this host only, but host '{}' is not this "
                                     "host ({}); use --launcher mpirun or srun",
                                     h.name, self));
  }
  if (requested == LauncherKind::pod && alloc.source != AllocationSource::pod)
    throw InputError("--launcher pod starts one pod's ranks of a per-pod Kubernetes job, but PET_NNODES is not set "
                     "here; run it in the job's pods (README, On Kubernetes), or use --launcher auto");
  if (requested != LauncherKind::automatic) return requested;
  for (const BackendRow& row : backend_rows())
    if (row.detects(alloc, all_local)) return row.kind;
  return LauncherKind::mpirun;
}

// The sysfs tree NCCL facts are read from: RINGRUN_SYSFS_ROOT (tests' fixture trees), else /sys.
std::string sysfs_root(const Environment& env) { return *variables::read_text(variables::kSysfsRoot, &env); }

// This host's interfaces: the names in /sys/class/net, with IFF_UP and IPv4 addresses from
// getifaddrs. An address in 169.254.0.0/16 (link-local) does not count as one.
std::vector<NetworkInterface> host_interfaces() {
  std::map<std::string, NetworkInterface> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = entry.path().filename().string();
    found[name].name = name;
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_name) continue;
      NetworkInterface& i = found[a->ifa_name];
      i.name = a->ifa_name;
      i.up = i.up || (a->ifa_flags & IFF_UP) != 0;
      if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
        const uint32_t address = ntohl(in->sin_addr.s_addr);
        if ((address >> 16) != 0xa9fe) i.has_ipv4 = true;  // 169.254/16
      }
    }
    ::freeifaddrs(list);
  }
  std::vector<NetworkInterface> out;
  for (auto& [name, i] : found) out.push_back(std::move(i));
  return out;
}

// The netdevs of the topology's NICs, fabric NICs (what the plan gives ranks) before Ethernet.
std::vector<std::string> topology_netdevs(const std::optional<topology::Topology>& topo) {
  std::vector<std::string> fabric, ethernet;
  if (topo)
    for (const auto& nic : topo->nics)
      (nic.kind == "ethernet" ? ethernet : fabric).insert((nic.kind == "ethernet" ? ethernet : fabric).end(),
                                                          nic.netdevs.begin(), nic.netdevs.end());
  fabric.insert(fabric.end(), ethernet.begin(), ethernet.end());
  return fabric;
}

}  // namespace

Environment environment_from(char** envp) {
  Environment env;
  for (char** e = envp; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

int show_topology(const Invocation& inv, const Environment& env) {
  topology::Topology topo = inv.topology_file ? topology::load_xml(*inv.topology_file) : topology::load_live();
  std::optional<std::vector<topology::LocalSlot>> slots;
  if (inv.launch.num_proc) {
    try {
      slots = topology::plan_node(topo, *inv.launch.num_proc, inv.launch.node);
    } catch (const std::invalid_argument& e) {
      throw InputError(fmt::format("-np {} : {}", *inv.launch.num_proc, e.what()));
    }
    // Report the RoCE GID index NCCL would use on each slot's HCA port.
    const auto gid_indexes = topology::roce_gid_indexes(sysfs_root(env), topo);
    for (auto& slot : *slots) {
      auto hca = slot.env.find("NCCL_IB_HCA");
      if (hca == slot.env.end()) continue;
      if (auto it = gid_indexes.find(hca->second.substr(1)); it != gid_indexes.end()) slot.roce_gid_index = it->second;
    }
  }
  std::cout << (inv.json ? topology::topology_to_json(topo, slots ? &*slots : nullptr)
                         : topology::render_topology_table(topo, slots ? &*slots : nullptr));
  return 0;
}

int show_template(const Invocation& inv) {
  TemplateParams params;
  if (inv.template_nodes > 0) params.nodes = inv.template_nodes;
  params.gpus_per_node = inv.template_gpus_per_node;
  params.time = inv.template_time;
  if (!inv.launch.program.empty()) params.program = inv.launch.program;
  std::cout << render_template(inv.template_name, params);
  return 0;
}

namespace {

// The launcher for this job, and what choosing it had to say.
struct LauncherChoice {
  LauncherKind kind = LauncherKind::local;
  bool mpi_on_this_host = false;  // an MPI program on this host alone, under mpirun
  std::vector<std::string> notes, warnings;
};

LauncherChoice choose_launcher(const Invocation& inv, const Environment& env, const Allocation& alloc,
                               const std::string& self, const PodJob& job) {
  LauncherChoice choice;
  choice.kind = resolve_launcher(inv.launch.launcher, alloc, self);
  // An MPI program on this host alone goes under mpirun, which makes its ranks one MPI world.
  // Elastic mode starts its processes itself: an MPI program stays on the local launcher there.
  if (inv.launch.launcher == LauncherKind::automatic && choice.kind == LauncherKind::local && !inv.elastic.enabled()) {
    choice.kind = launcher_for_mpi_program(choice.kind, inv.launch.program, env, choice.notes, choice.warnings);
    choice.mpi_on_this_host = choice.kind == LauncherKind::mpirun;
  }
  // horovodrun's --mpi-args: mpirun starts the ranks, as under horovodrun, on this host too.
  if (!inv.launch.mpirun_args.empty() && choice.kind != LauncherKind::mpirun) {
    if (inv.elastic.enabled())
      throw InputError("--mpi-args: this elastic job starts its processes without mpirun; give --launcher mpirun "
                       "(one mpirun per process) or drop --mpi-args");
    choice.mpi_on_this_host = choice.kind == LauncherKind::local;
    choice.kind = LauncherKind::mpirun;
  }
  if (inv.elastic.enabled()) require_elastic_launcher(inv, choice.kind, alloc);
  std::vector<std::string> remote;
  for (const auto& h : alloc.hosts)
    if (!is_local_host(h.name, self)) remote.push_back(h.name);
  // An MPIJob's workers: a pod's DNS record appears once the pod is ready, which may be after the
  // launcher starts (README, On Kubernetes).
  if (!inv.dry_run && backend_row(choice.kind).uses_ssh && alloc.source == AllocationSource::mpijob)
    wait_for_dns(remote, fmt::format("the MPIJob hostfile '{}'", job.mpijob->hostfile),
                 inv.launch.start_timeout_s.value_or(default_start_timeout(alloc.hosts.size())));
  // Every host named before anything starts on one (mpirun's ssh would report them one by one).
  if (!inv.dry_run && backend_row(choice.kind).uses_ssh &&
      (alloc.source == AllocationSource::hosts_flag || alloc.source == AllocationSource::hostfile ||
       alloc.source == AllocationSource::discovery_script)) {
    require_resolvable_hosts(remote,
                             inv.hosts      ? fmt::format("-H '{}'", *inv.hosts)
                             : inv.hostfile ? fmt::format("--hostfile '{}'", *inv.hostfile)
                                            : fmt::format("--host-discovery-script '{}'",
                                                          inv.elastic.discovery_script.value_or("")),
                             env);
  }
  return choice;
}

// -np when not given: the discovery script's slots (elastic), --min-np on this host, else the
// allocation's slots or this host's GPUs. Returns the elastic start count (0: the plan's -np).
int settle_num_proc(const Invocation& inv, const std::optional<DiscoveredStart>& discovered,
                    const std::optional<topology::Topology>& topo, Allocation& alloc, LaunchOptions& options) {
  int elastic_start_np = 0;
  if (discovered) {
    elastic_start_np = discovered->start_np;
    options.num_proc = discovered->hosts.total_slots();
  }
  // Elastic on -H/--hostfile hosts starts on every slot up to --max-np, as horovodrun does (-np is
  // then how many it needs at the start: --min-np's default).
  const bool named_hosts = alloc.source == AllocationSource::hosts_flag || alloc.source == AllocationSource::hostfile ||
                           alloc.source == AllocationSource::mpijob;
  if (inv.elastic.enabled() && named_hosts) {
    const int slots = alloc.total_slots();
    options.num_proc = std::min(slots, inv.elastic.max_np.value_or(slots));
    elastic_start_np = *options.num_proc;
  }
  // horovodrun's default: a job on this host starts with --min-np.
  if (!options.num_proc && inv.elastic.min_np && options.launcher == LauncherKind::local) {
    options.num_proc = inv.elastic.min_np;
  }
  if (!options.num_proc) {
    int gpus = 0;
    if (topo) gpus = static_cast<int>(topology::usable_gpu_count(*topo, options.node));
    options.num_proc = default_num_proc(alloc, gpus);
    // Elastic mode without -np or --min-np: start with the usual count, at most --max-np.
    if (inv.elastic.max_np) options.num_proc = std::min(*options.num_proc, *inv.elastic.max_np);
  }
  if (alloc.source == AllocationSource::local) alloc.hosts[0].slots = *options.num_proc;
  if (inv.elastic.min_np && *options.num_proc < *inv.elastic.min_np)
    throw InputError(fmt::format("--min-np {} : the job has {} slots (-np, else the allocation's); give at least {} "
                                 "or lower --min-np",
                                 *inv.elastic.min_np, *options.num_proc, *inv.elastic.min_np));
  return elastic_start_np;
}

// The interface the ranks use. Several hosts: the one all of them share, from one probe step over
// the nodes (not in a dry run, which starts nothing; not for a job named by --jobid, whose nodes
// srun cannot reach from here without it); else this host's.
void choose_interface(const Invocation& inv, const LaunchOptions& options, const Environment& env,
                      const std::optional<topology::Topology>& topo, PlanInputs& in) {
  if (options.network_interface) return;
  const Allocation& allocation = in.allocation;
  if (!inv.dry_run && backend_row(options.launcher).reaches_hosts && allocation.hosts.size() > 1 &&
      allocation.source != AllocationSource::slurm_job) {
    std::vector<std::string> names;
    for (const auto& h : allocation.hosts) names.push_back(h.name);
    auto shared = netprobe::probe_shared_interface(names, allocation.source == AllocationSource::slurm_env, env, inv.verbose);
    if (shared.name) in.chosen_interface = InterfaceChoice{*shared.name, shared.reason};
  } else {
    in.chosen_interface = choose_network_interface(host_interfaces(), topology_netdevs(topo));
  }
}

// The rendezvous store lives in ringrun for the whole job, listening only where ranks reach it:
// loopback for a local job, the chosen interface's address otherwise (every address only when
// no interface is known). A dry run only names a port.
struct StoreEndpoint {
  std::unique_ptr<store::Server> server;
  std::optional<std::string> ip;  // this host's address on the chosen interface
  int port = 0;
};

StoreEndpoint open_store(const Invocation& inv, const LaunchOptions& options, PlanInputs& in, bool single_local,
                         const std::string& self, const std::optional<PodContract>& pod) {
  StoreEndpoint store;
  // A per-pod job: pod 0 holds the store at PET_MASTER_PORT, every pod's ranks reach it at
  // PET_MASTER_ADDR (a name the other pods resolve).
  if (pod) {
    store.port = pod->master_port;
    if (!inv.dry_run && pod->node_rank == 0)
      store.server = std::make_unique<store::Server>("0.0.0.0", static_cast<std::uint16_t>(pod->master_port),
                                                     in.job_secret);
    in.store_addr = fmt::format("{}:{}", pod->master_addr, pod->master_port);
    return store;
  }
  // Ranks on other nodes reach the store at this host's address on the chosen interface (a name
  // need not resolve there); without one, at this host's name.
  if (!single_local && (options.network_interface || in.chosen_interface))
    store.ip = netprobe::local_ipv4_of(options.network_interface ? *options.network_interface : in.chosen_interface->name);
  if (inv.dry_run) {
    store.port = free_port();
  } else {
    store.server = std::make_unique<store::Server>(single_local ? "127.0.0.1" : store.ip.value_or("0.0.0.0"), 0,
                                                   in.job_secret);
    store.port = store.server->port();
  }
  in.store_addr = fmt::format("{}:{}", single_local ? "127.0.0.1" : store.ip.value_or(self), store.port);
  return store;
}

// The plan's warnings (and with --verbose its notes and table); for a dry run the plan itself.
void show_plan(const Invocation& inv, const Plan& plan) {
  for (const std::string& warning : plan.warnings) std::cerr << warning << '\n';
  if (inv.verbose)
    for (const std::string& note : plan.notes) std::cerr << note << '\n';
  if (inv.dry_run) {
    if (!inv.json) std::cout << "command: " << netprobe::shell_words(plan.command) << '\n';
    if (inv.json) write_plan_json(plan, std::cout);
    else std::cout << plan_to_table(plan) << std::flush;
  } else if (inv.verbose) {
    std::cerr << fmt::format("ringrun: {} ranks on {} host(s) with the {} launcher\n", plan.world_size,
                             plan.hosts.size(), to_string(plan.launcher))
              << "ringrun: command: " << netprobe::shell_words(plan.command) << '\n'
              << plan_to_table(plan);
  }
}

// Starts the plan's processes and supervises them to the end: ringrun's exit status.
int run_plan(const Invocation& inv, const Environment& env, const Plan& plan, Backend& backend,
             const LauncherChoice& choice, const StoreEndpoint& store, const std::string& job_secret,
             const ElasticStart& elastic_start, const std::string& self) {
  if (inv.elastic.enabled()) {
    // One process per slot; the store is the one run_invocation owns.
    std::vector<ProcessSpec> slots = backend.elastic_slots(plan, env);
    AddedHostSlots added_host;
    if (backend_row(plan.launcher).reaches_hosts) {
      added_host = [&backend, &env](const std::string& host, int slots, int first_slot) {
        return backend.elastic_added_host(host, slots, first_slot, env);
      };
    } else if (elastic_start.local_host_slots > 0) {
      // Another name of this machine the script prints later: planned as the first host (every
      // local name is planned alike); its processes take their own names from their world.
      std::vector<ProcessSpec> like(slots.begin(),
                                    slots.begin() + std::min<std::ptrdiff_t>(std::ssize(slots), elastic_start.local_host_slots));
      added_host = [like = std::move(like)](const std::string&, int n, int) {
        return std::vector<ProcessSpec>(like.begin(), like.begin() + std::min<std::ptrdiff_t>(n, std::ssize(like)));
      };
    }
    return run_elastic(std::move(slots), elastic_config(inv, plan, elastic_start, self, env),
                       inv.supervisor,
                       ElasticStoreAddress{store.ip.value_or("127.0.0.1"), static_cast<std::uint16_t>(store.port),
                                           job_secret},
                       std::move(added_host));
  }
  std::vector<ProcessSpec> processes = backend.processes(plan, env);
  // A local job of MPI singletons is said once, after the summary, never silently; not twice
  // when the missing-mpirun warning said it before the start.
  std::unique_ptr<SingletonWatch> singletons;
  if (backend_row(plan.launcher).on_loopback && choice.warnings.empty())
    singletons = SingletonWatch::start(processes, env);
  if (singletons) singletons->apply(processes);
  const int status = supervise(processes, inv.supervisor);
  if (singletons && singletons->mpi_initialized()) std::cerr << kSingletonHint << '\n';
  return status;
}

// What horovodrun's -p/-i do in this job (ringrun(1), HOROVODRUN OPTIONS), for --verbose.
std::string ssh_note(const LaunchOptions& options) {
  const std::string args = fmt::format("{}", fmt::join(options.ssh_args, " "));
  if (backend_row(options.launcher).uses_ssh)
    return fmt::format("ringrun: mpirun's ssh to the hosts gets '{}' (OMPI_MCA_plm_rsh_args)", args);
  return fmt::format("ringrun: '{}' (horovodrun's -p/-i) changes nothing here: the {} launcher starts the ranks "
                     "without ssh", args, to_string(options.launcher));
}

}  // namespace

namespace {

// The topology this launch plans from: a given XML file stands for every host; otherwise this
// host's own where ranks start here (others are planned by their own task shim). The per-node
// cache: a live load scans PCI, which on a VM costs more than starting the ranks.
std::optional<topology::Topology> launch_topology(const Invocation& inv, const LaunchOptions& options,
                                                  const LauncherChoice& choice) {
  if (inv.topology_file) return topology::load_xml(*inv.topology_file);
  if (backend_row(options.launcher).runs_here || choice.mpi_on_this_host) return topology::load_live_cached();
  return std::nullopt;
}

// Every host is planned from this one topology: one layout per ranks-per-host count (a
// 4,096-node plan would otherwise lay out the same node 4,096 times).
void plan_nodes_from(const std::optional<topology::Topology>& topo, const LaunchOptions& options, PlanInputs& in) {
  if (!topo) return;
  auto layouts = std::make_shared<std::map<int, std::vector<topology::LocalSlot>>>();
  in.node_layout = [topo, options, layouts](std::size_t, int local_size) {
    auto it = layouts->find(local_size);
    if (it == layouts->end()) it = layouts->emplace(local_size, topology::plan_node(*topo, local_size, options.node)).first;
    return it->second;
  };
}

// The job itself (run_invocation's `ringrun [OPTIONS] PROGRAM`).
int run_job(const Invocation& given, const Environment& env) {
  const std::string self = local_hostname();
  const PodJob job = pod_job(env, given.hosts || given.hostfile || given.job_id);
  Allocation alloc = gather_allocation(given, env, self, job);
  const Invocation inv = with_contract_defaults(given, job, alloc);
  const double discovery_interval_s = discovery_interval(inv, env);
  const std::optional<DiscoveredStart> discovered = discovered_start(inv, self, discovery_interval_s);
  // Hosts of this machine alone replace no allocation: inside one, require_elastic_launcher refuses
  // the script unless it names other hosts (the job then runs on them through mpirun).
  if (discovered && (discovered->local_host_slots == 0 || alloc.source == AllocationSource::local))
    alloc = discovered->hosts;
  LaunchOptions options = inv.launch;
  const LauncherChoice choice = choose_launcher(inv, env, alloc, self, job);
  options.launcher = choice.kind;
  const std::optional<topology::Topology> topo = launch_topology(inv, options, choice);

  // The GPUs a rank may use: what the inherited CUDA_VISIBLE_DEVICES (AMD: ROCR_VISIBLE_DEVICES)
  // allows.
  inherit_visible_gpus(env, options.node);
  const int elastic_start_np = settle_num_proc(inv, discovered, topo, alloc, options);

  PlanInputs in;
  in.allocation = std::move(alloc);  // a 4,096-host allocation is not worth a copy
  in.launcher_env = env;
  const bool single_local = backend_row(options.launcher).on_loopback || choice.mpi_on_this_host;
  in.master_addr = single_local ? "127.0.0.1" : job.pod ? job.pod->master_addr : in.allocation.hosts.front().name;
  in.master_port = free_port();
  in.job_secret = inv.dry_run ? std::string(64, '0') : job.pod ? pod_job_secret(*job.pod, env) : job_secret();
  plan_nodes_from(topo, options, in);
  // NCCL facts of this host (the task shims find their own node's).
  in.nccl_version = cached_nccl_version(env);
  in.python_package_dir = find_python_package_dir(executable_dir());
  in.virtualenv = find_virtualenv(executable_dir());
  if (topo) in.roce_gid_indexes = topology::roce_gid_indexes(sysfs_root(env), *topo);
  choose_interface(inv, options, env, topo, in);

  std::unique_ptr<Backend> backend = make_backend(options.launcher);
  const StoreEndpoint store = open_store(inv, options, in, single_local, self, job.pod);

  Plan plan = make_plan(in, options);
  plan.launcher = options.launcher;
  plan.command = backend->command(plan, options, env);
  plan.warnings.insert(plan.warnings.end(), choice.warnings.begin(), choice.warnings.end());
  if (job.mpijob) plan.notes.push_back("ringrun: " + describe_mpijob(*job.mpijob, in.allocation));
  plan.notes.insert(plan.notes.end(), choice.notes.begin(), choice.notes.end());
  plan.notes.insert(plan.notes.end(), inv.notes.begin(), inv.notes.end());
  if (!options.ssh_args.empty()) plan.notes.push_back(ssh_note(options));
  if (inv.dry_run && !inv.json && job.mpijob) std::cout << describe_mpijob(*job.mpijob, in.allocation) << '\n';
  show_plan(inv, plan);
  if (inv.dry_run) return 0;
  if (job.pod && job.pod->node_rank > 0) wait_for_pod_store(*job.pod, in.job_secret, plan.start_timeout_s);
  ElasticStart elastic_start{elastic_start_np, {}, 0, discovery_interval_s, false};
  if (discovered) {
    elastic_start.offered = discovered->offered;
    elastic_start.local_host_slots = discovered->local_host_slots;
  }
  const AllocationSource source = in.allocation.source;
  elastic_start.named_hosts = source == AllocationSource::hosts_flag || source == AllocationSource::hostfile ||
                              source == AllocationSource::discovery_script || source == AllocationSource::mpijob;
  elastic_start.replaced_hosts_return = job.mpijob.has_value();
  return run_plan(inv, env, plan, *backend, choice, store, in.job_secret, elastic_start, self);
}

}  // namespace

int run_invocation(const Invocation& inv, const Environment& env) {
  if (inv.command == Command::topo) return show_topology(inv, env);
  if (inv.command == Command::template_) return show_template(inv);
  if (inv.command == Command::check_build) return run_check_build(env);
  if (inv.command == Command::doctor)
    return run_doctor(env, DoctorOptions{inv.json, inv.doctor_all_nodes, inv.doctor_report,
                                         inv.launch.network_interface});
  return run_job(inv, env);
}

}  // namespace ringrun
