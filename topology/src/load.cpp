// Reading a Topology out of hwloc: GPUs, NICs, cores and the GPU-to-NIC distances.
#include <hwloc.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ringrun/variable_read.hpp>
#include "ringrun/topology.hpp"
#include "ringrun/topology_cache.hpp"
#include "native/readers.hpp"
#include "nic_order.hpp"

namespace ringrun::topology {
namespace {

struct TopologyCloser {
  void operator()(hwloc_topology* topo) const { hwloc_topology_destroy(topo); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyCloser>;

struct BitmapFree {
  void operator()(hwloc_bitmap_s* set) const { hwloc_bitmap_free(set); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapFree>;

Bitmap make_bitmap() { return Bitmap(hwloc_bitmap_alloc()); }

std::vector<unsigned> to_pus(hwloc_const_bitmap_t set) {
  std::vector<unsigned> pus;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) {
    pus.push_back(static_cast<unsigned>(i));
  }
  return pus;
}

using PciKey = std::tuple<unsigned, unsigned, unsigned, unsigned>;

PciKey pci_key(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return {a.domain, a.bus, a.dev, a.func};
}

std::string bus_id_of(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.dev, a.func);
}

// The PCI function an OS device hangs from (its parent in hwloc 2.x), or nullptr.
hwloc_obj_t pci_parent(hwloc_obj_t osdev) {
  for (hwloc_obj_t p = osdev->parent; p; p = p->parent) {
    if (p->type == HWLOC_OBJ_PCI_DEVICE) return p;
    if (p->type != HWLOC_OBJ_OS_DEVICE) return nullptr;
  }
  return nullptr;
}

bool starts_with(const char* s, const char* prefix) {
  return s && std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// Trailing number of an OS device name ("rsmi12" -> 12) so "rsmi10" sorts after "rsmi9".
long name_number(const std::string& name) {
  size_t i = name.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(name[i - 1]))) --i;
  return i == name.size() ? -1 : std::strtol(name.c_str() + i, nullptr, 10);
}

// GPU OS device backends, most preferred name first. DRM card*/renderD* are deliberately absent:
// they duplicate the GPU that cuda/nvml/rsmi already name.
constexpr std::array<const char*, 4> gpu_backends = {"cuda", "rsmi", "nvml", "opencl"};

int gpu_backend(hwloc_obj_t osdev) {
  if (osdev->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU && osdev->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC) {
    return -1;
  }
  for (size_t b = 0; b < gpu_backends.size(); ++b) {
    if (starts_with(osdev->name, gpu_backends[b])) return static_cast<int>(b);
  }
  return -1;
}

// A GPU without OS device (hwloc built without CUDA/NVML/RSMI): NVIDIA or AMD display/3D
// controllers, and AMD's accelerator classes (MI250X: 0380, MI300A: 1200).
bool is_gpu_pci_class(hwloc_obj_t pci) {
  const unsigned cls = pci->attr->pcidev.class_id;
  const unsigned vendor = pci->attr->pcidev.vendor_id;
  if (vendor == 0x10de) return cls == 0x0300 || cls == 0x0302;
  if (vendor == 0x1002) return cls == 0x0300 || cls == 0x0302 || cls == 0x0380 || cls == 0x1200;
  return false;
}

const char* vendor_of(hwloc_obj_t pci) {
  switch (pci->attr->pcidev.vendor_id) {
    case 0x10de: return "nvidia";
    case 0x1002: return "amd";
    default: return "other";
  }
}

class Reader {
 public:
  explicit Reader(hwloc_topology_t topo) : topo_(topo), allowed_(make_bitmap()) {
    hwloc_bitmap_copy(allowed_.get(), hwloc_topology_get_allowed_cpuset(topo));
    hwloc_bitmap_and(allowed_.get(), allowed_.get(), hwloc_topology_get_topology_cpuset(topo));
  }

  Topology read(std::string origin) {
    Topology t;
    t.origin = std::move(origin);
    read_numa(t);
    read_cores(t);
    read_gpus(t);
    read_nics(t);
    read_distances(t);
    return t;
  }

 private:
  struct NumaNode {
    int os_index;
    hwloc_const_cpuset_t cpuset;
  };

  void read_numa(Topology& t) {
    for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n));) {
      // CPU-less nodes (POWER9 GPU memory, CXL) hold no cores and are nobody's locality.
      if (!n->cpuset || !hwloc_bitmap_intersects(n->cpuset, allowed_.get())) continue;
      numa_.push_back({static_cast<int>(n->os_index), n->cpuset});
      t.numa_nodes.push_back(static_cast<int>(n->os_index));
    }
  }

  std::vector<int> numa_of(hwloc_const_cpuset_t cpuset) const {
    std::vector<int> nodes;
    for (const auto& n : numa_) {
      if (hwloc_bitmap_intersects(n.cpuset, cpuset)) nodes.push_back(n.os_index);
    }
    return nodes;
  }

  static int index_of(hwloc_obj_t obj) {
    return obj->os_index == HWLOC_UNKNOWN_INDEX ? static_cast<int>(obj->logical_index)
                                                : static_cast<int>(obj->os_index);
  }

  void read_cores(Topology& t) {
    // Walk PUs and group them under their core, so machines whose XML has no Core level still work.
    std::map<hwloc_obj_t, size_t> core_slot;
    for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_PU, pu));) {
      if (!hwloc_bitmap_isset(allowed_.get(), pu->os_index)) continue;
      hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_CORE, pu);
      hwloc_obj_t owner = core ? core : pu;
      auto [it, inserted] = core_slot.try_emplace(owner, t.cores.size());
      if (inserted) {
        Core c;
        const auto nodes = numa_of(owner->cpuset);
        c.numa = nodes.empty() ? -1 : nodes.front();
        hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, owner);
        c.package = package ? index_of(package) : -1;
        t.cores.push_back(std::move(c));
      }
      t.cores[it->second].pus.push_back(pu->os_index);
    }
  }

  void read_gpus(Topology& t) {
    // OS devices grouped per PCI function and backend; one GPU per device of the backend that
    // names the most (g4dn: cuda0+nvml0+opencl0d0 = 1 GPU; MI300A CPX: rsmi0..5 = 6 GPUs).
    std::map<PciKey, std::pair<hwloc_obj_t, std::array<std::vector<hwloc_obj_t>, gpu_backends.size()>>> by_pci;
    for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo_, os));) {
      const int backend = gpu_backend(os);
      if (backend < 0) continue;
      hwloc_obj_t pci = pci_parent(os);
      if (!pci) continue;
      auto& entry = by_pci[pci_key(pci)];
      entry.first = pci;
      entry.second[static_cast<size_t>(backend)].push_back(os);
    }
    for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo_, pci));) {
      if (!by_pci.count(pci_key(pci)) && is_gpu_pci_class(pci)) by_pci[pci_key(pci)].first = pci;
    }
    for (auto& [key, entry] : by_pci) {  // std::map: PCI bus order
      hwloc_obj_t pci = entry.first;
      std::vector<hwloc_obj_t>* names = nullptr;
      for (auto& devices : entry.second) {
        if (!names || devices.size() > names->size()) names = &devices;
      }
      Gpu proto;
      proto.bus_id = bus_id_of(pci);
      proto.vendor = vendor_of(pci);
      hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo_, pci);
      Bitmap cpus = make_bitmap();
      if (local && local->cpuset) hwloc_bitmap_and(cpus.get(), local->cpuset, allowed_.get());
      proto.numa_nodes = numa_of(cpus.get());
      proto.local_cpus = to_pus(cpus.get());
      if (!names || names->empty()) {
        const char* model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
        proto.name = model ? std::string(model)
                           : fmt::format("{:04x}:{:04x}", pci->attr->pcidev.vendor_id, pci->attr->pcidev.device_id);
        t.gpus.push_back(proto);
        gpu_objects_.push_back(pci);
        continue;
      }
      std::sort(names->begin(), names->end(), [](hwloc_obj_t a, hwloc_obj_t b) {
        return name_number(a->name) < name_number(b->name);
      });
      for (hwloc_obj_t os : *names) {
        Gpu gpu = proto;
        gpu.name = os->name;
        t.gpus.push_back(std::move(gpu));
        gpu_objects_.push_back(pci);
      }
    }
  }

  void read_nics(Topology& t) {
    std::map<PciKey, std::vector<std::string>> netdevs_by_pci;
    std::set<PciKey> fabric_functions;
    std::vector<std::pair<hwloc_obj_t, hwloc_obj_t>> plain;  // (netdev, its PCI function)
    for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo_, os));) {
      hwloc_obj_t pci = pci_parent(os);
      if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && pci && os->name) {
        netdevs_by_pci[pci_key(pci)].push_back(os->name);
        plain.emplace_back(os, pci);
      } else if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && os->name) {
        Nic nic;
        nic.name = os->name;
        const bool efa = starts_with(os->name, "rdmap") || starts_with(os->name, "efa") ||
                         (pci && pci->attr->pcidev.vendor_id == 0x1d0f);
        nic.kind = efa ? "efa" : "infiniband";
        for (unsigned i = 0; i < os->infos_count; ++i) {
          int port = 0;
          int consumed = 0;
          const char* info = os->infos[i].name;
          if (std::sscanf(info, "Port%dState%n", &port, &consumed) == 1 && info[consumed] == '\0') {
            nic.ports.push_back(port);
            nic.port_states.push_back(std::atoi(os->infos[i].value));
          }
        }
        if (nic.ports.empty()) {
          // hwloc reports ports only through their attributes; look for any "Port<N>..." info.
          std::set<int> seen;
          for (unsigned i = 0; i < os->infos_count; ++i) {
            int port = 0;
            if (std::sscanf(os->infos[i].name, "Port%d", &port) == 1) seen.insert(port);
          }
          nic.ports.assign(seen.begin(), seen.end());
          nic.port_states.assign(nic.ports.size(), 0);
        }
        add_nic(t, std::move(nic), pci ? pci : os);
        if (pci) fabric_functions.insert(pci_key(pci));
      }
    }
    // Netdevs on the PCI function of an OpenFabrics device belong to it (mlx5_0 -> ib0/hsi0).
    for (size_t i = 0; i < t.nics.size(); ++i) {
      hwloc_obj_t obj = nic_objects_[i];
      if (obj->type == HWLOC_OBJ_PCI_DEVICE) t.nics[i].netdevs = netdevs_by_pci[pci_key(obj)];
    }
    for (auto [os, pci] : plain) {
      if (fabric_functions.count(pci_key(pci))) continue;
      Nic nic;
      nic.name = os->name;
      const bool slingshot = pci->attr->pcidev.vendor_id == 0x17db ||
                             (os->subtype && std::strcmp(os->subtype, "Slingshot") == 0);
      nic.kind = slingshot ? "slingshot" : "ethernet";
      nic.netdevs = {os->name};
      add_nic(t, std::move(nic), pci);
    }
    sort_nics(t.nics, nic_objects_);
  }

  void add_nic(Topology& t, Nic nic, hwloc_obj_t location) {
    if (location->type == HWLOC_OBJ_PCI_DEVICE) nic.bus_id = bus_id_of(location);
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo_, location);
    if (local && local->cpuset) nic.numa_nodes = numa_of(local->cpuset);
    t.nics.push_back(std::move(nic));
    nic_objects_.push_back(location);
  }

  std::set<int> packages_of(hwloc_obj_t io) const {
    std::set<int> packages;
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo_, io);
    if (!local || !local->cpuset) return packages;
    for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, p));) {
      if (hwloc_bitmap_intersects(p->cpuset, local->cpuset)) packages.insert(index_of(p));
    }
    return packages;
  }

  NicDistance distance(const Gpu& gpu, hwloc_obj_t gpu_obj, const Nic& nic, hwloc_obj_t nic_obj) const {
    // hwloc_get_common_ancestor_obj() compares depths, which I/O objects do not have: walk parents.
    std::set<hwloc_obj_t> above_gpu;
    for (hwloc_obj_t p = gpu_obj; p; p = p->parent) above_gpu.insert(p);
    hwloc_obj_t common = nic_obj;
    while (common && !above_gpu.count(common)) common = common->parent;
    if (common && hwloc_obj_type_is_io(common->type)) {
      // A host bridge is a bridge whose upstream side is the host; every other common bridge
      // (root port, PCIe switch port) or PCI device means the same PCI switch.
      const bool host_bridge = common->type == HWLOC_OBJ_BRIDGE &&
                               common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
      return host_bridge ? NicDistance::same_host_bridge : NicDistance::same_pci_switch;
    }
    for (int n : gpu.numa_nodes) {
      if (std::find(nic.numa_nodes.begin(), nic.numa_nodes.end(), n) != nic.numa_nodes.end()) {
        return NicDistance::same_numa;
      }
    }
    const auto a = packages_of(gpu_obj);
    const auto b = packages_of(nic_obj);
    for (int p : a) {
      if (b.count(p)) return NicDistance::same_package;
    }
    // No package information at all (some XML exports): one machine, treat as one package.
    if (a.empty() && b.empty()) return NicDistance::same_package;
    return NicDistance::across_packages;
  }

  void read_distances(Topology& t) {
    t.nic_distance.resize(t.gpus.size());
    for (size_t g = 0; g < t.gpus.size(); ++g) {
      for (size_t n = 0; n < t.nics.size(); ++n) {
        t.nic_distance[g].push_back(distance(t.gpus[g], gpu_objects_[g], t.nics[n], nic_objects_[n]));
      }
    }
  }

  hwloc_topology_t topo_;
  Bitmap allowed_;
  std::vector<NumaNode> numa_;
  std::vector<hwloc_obj_t> gpu_objects_;  // PCI function of t.gpus[i]
  std::vector<hwloc_obj_t> nic_objects_;  // PCI function (or OS device) of t.nics[i]
};

TopologyHandle make_topology(const std::string& what) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    throw TopologyError(fmt::format("ringrun: cannot read the topology of {}: hwloc_topology_init: {}", what,
                                    std::strerror(errno)));
  }
  TopologyHandle topo(raw);
  // Keep every PCI bridge: the GPU-to-NIC distance is read from the bridges they share.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  // hwloc's GL component tries to open X displays :0 to :N over sockets (about 15 ms on a
  // headless node) and finds only display GPUs that the PCI scan already found.
  hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
  return topo;
}

// Why hwloc refused a file, when it can be told from the first bytes (hwloc itself only says
// EINVAL unless HWLOC_XML_VERBOSE is set).
std::string rejection_reason(const std::string& path) {
  std::ifstream in(path);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const size_t topology = head.find("<topology");
  if (topology == std::string::npos) {
    if (head.find("<system") != std::string::npos) {
      return "it is an NCCL topology file (NCCL_TOPO_FILE), not an hwloc export; give 'lstopo --of xml' output";
    }
    return "no <topology> element, not an hwloc XML export; give 'lstopo --of xml' output";
  }
  const size_t version = head.find("version=\"", topology);
  if (version != std::string::npos && version < head.find('>', topology)) {
    const int major = std::atoi(head.c_str() + version + 9);
    if (major > 2) {
      return fmt::format("hwloc XML version {} is newer than this hwloc {}.x reads; export it with hwloc 2.x",
                         head.substr(version + 9, head.find('"', version + 9) - version - 9), HWLOC_API_VERSION >> 16);
    }
  }
  return fmt::format("{}; run 'lstopo --input {} --of console' to see hwloc's details", std::strerror(EINVAL), path);
}

}  // namespace

Topology load_live() {
  TopologyHandle topo = make_topology("this machine");
  if (hwloc_topology_load(topo.get()) != 0) {
    throw TopologyError(fmt::format("ringrun: cannot read the topology of this machine: hwloc_topology_load: {}",
                                    std::strerror(errno)));
  }
  return Reader(topo.get()).read("live");
}

namespace {
constexpr std::string_view kSynthetic = "synthetic:";
}  // namespace

std::optional<Topology> load_xml_native(const std::string& path) {
  if (path.compare(0, kSynthetic.size(), kSynthetic) == 0) {
    return native::read_synthetic(path.substr(kSynthetic.size()), path);
  }
  return native::read_xml(path);
}

Topology load_xml(const std::string& path) {
  const std::string choice = *variables::read_text(variables::kTopologyLoader);
  if (choice == "hwloc") return load_xml_hwloc(path);
  if (choice != "native") {
    throw TopologyError(fmt::format("ringrun: {}='{}' is neither 'native' nor 'hwloc' (reading --topology '{}')",
                                    variables::kTopologyLoader.name, choice, path));
  }
  // What the native readers do not handle (hwloc 1.x files, unusual constructs, synthetic
  // attributes) and every file that is not a valid export go to hwloc, which reads it or says why.
  if (auto topo = load_xml_native(path)) return std::move(*topo);
  return load_xml_hwloc(path);
}

Topology load_xml_hwloc(const std::string& path) {
  if (path.compare(0, kSynthetic.size(), kSynthetic) == 0) {
    const std::string description = path.substr(kSynthetic.size());
    TopologyHandle topo = make_topology(path);
    if (hwloc_topology_set_synthetic(topo.get(), description.c_str()) != 0 || hwloc_topology_load(topo.get()) != 0) {
      throw TopologyError(fmt::format("ringrun: --topology '{}': hwloc rejects the synthetic description: {}; write "
                                      "it like 'synthetic:pack:2 numa:2 core:16 pu:2'",
                                      path, std::strerror(errno)));
    }
    return Reader(topo.get()).read(path);
  }
  // hwloc would take a missing file for a synthetic description; say what is wrong instead.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw TopologyError(fmt::format("ringrun: --topology '{}': no such file; give an hwloc XML export "
                                    "(lstopo --of xml FILE)", path));
  }
  TopologyHandle topo = make_topology(path);
  // Not this system: the XML's own allowed cpuset decides what is usable, and disallowed PUs stay
  // in the tree so cores are whole; Reader intersects with the XML's allowed cpuset itself.
  hwloc_topology_set_flags(topo.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (hwloc_topology_set_xml(topo.get(), path.c_str()) != 0 || hwloc_topology_load(topo.get()) != 0) {
    throw TopologyError(fmt::format("ringrun: --topology '{}': hwloc rejects it: {}", path, rejection_reason(path)));
  }
  return Reader(topo.get()).read(path);
}

std::optional<int> first_active_port(const Nic& nic) {
  if (nic.ports.empty()) return std::nullopt;
  bool any_state = false;
  for (size_t i = 0; i < nic.ports.size(); ++i) {
    const int state = i < nic.port_states.size() ? nic.port_states[i] : 0;
    if (state == 4) return nic.ports[i];
    any_state = any_state || state != 0;
  }
  if (!any_state) return nic.ports.front();
  return std::nullopt;
}

namespace {

// The cache file of this node, or "" when /tmp/ringrun-UID is not a private directory of ours.
std::string topology_cache_path() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char host[256] = {};
  if (boot.empty() || ::gethostname(host, sizeof host - 1) != 0) return {};
  const std::string dir = fmt::format("/tmp/ringrun-{}", ::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return {};
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
    return {};
  return fmt::format("{}/topology-{}-{}-{:x}.xml", dir, host, boot, HWLOC_API_VERSION);
}

bool own_private_file(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 022) == 0;
}

// The cached export as this process sees it: allowed CPUs and NUMA nodes from the OS (its cgroup).
// Sets HWLOC_PLUGINS_PATH for a moment: for single-threaded callers (the task shim).
std::optional<Topology> load_cache(const std::string& path) {
  if (!own_private_file(path)) return std::nullopt;
  // Only the XML reader built into libhwloc is needed: look for no plugin (PCI, OpenCL, GL, and on
  // GPU nodes CUDA/NVML/RSMI, which load the vendor libraries) unless the user points hwloc at some;
  // shim CPU 4.3 -> 2.8 ms here. Plugins are looked for once, in the first hwloc_topology_init.
  // The path is a name in our private cache directory that is never created: hwloc's opendir
  // fails at once (the cache directory itself would cost a stat of every file in it).
  const bool no_plugins = std::getenv("HWLOC_PLUGINS_PATH") == nullptr;
  if (no_plugins) ::setenv("HWLOC_PLUGINS_PATH", (path.substr(0, path.rfind('/')) + "/no-hwloc-plugins").c_str(), 1);
  TopologyHandle topo = make_topology("this machine");
  if (no_plugins) ::unsetenv("HWLOC_PLUGINS_PATH");  // not for the program the shim starts
  if (hwloc_topology_set_xml(topo.get(), path.c_str()) != 0 ||
      hwloc_topology_set_flags(topo.get(), HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
                                               HWLOC_TOPOLOGY_FLAG_THISSYSTEM_ALLOWED_RESOURCES) != 0 ||
      hwloc_topology_load(topo.get()) != 0)
    return std::nullopt;
  return Reader(topo.get()).read("live");
}

// A live load of every PU, written to `path` through a private temporary file and a rename.
bool write_cache(const std::string& path) {
  TopologyHandle topo = make_topology("this machine");
  if (hwloc_topology_set_flags(topo.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0 ||
      hwloc_topology_load(topo.get()) != 0)
    return false;
  const std::string tmp = fmt::format("{}.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ::close(fd);
  if (hwloc_topology_export_xml(topo.get(), tmp.c_str(), 0) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

Topology load_live_cached() {
  const std::string path = topology_cache_path();
  if (path.empty()) return load_live();
  if (auto cached = load_cache(path)) return *cached;
  if (write_cache(path))
    if (auto cached = load_cache(path)) return *cached;
  return load_live();
}

}  // namespace ringrun::topology
