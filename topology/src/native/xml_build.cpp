// The Topology from the parsed Tree, with exactly the rules of load.cpp's Reader (test_native.cpp
// checks that both agree on every fixture): NUMA nodes and cores from the CPU side, GPUs and NICs
// from the PCI devices and their OS devices, and the GPU-NIC distances from where they meet.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "nic_order.hpp"
#include "xml_cpuset.hpp"
#include "xml_tree.hpp"

namespace ringrun::topology::native::xml {
namespace {

using PciKey = std::tuple<unsigned, unsigned, unsigned, unsigned>;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

long name_number(const std::string& name) {
  size_t i = name.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(name[i - 1]))) --i;
  return i == name.size() ? -1 : std::strtol(name.c_str() + i, nullptr, 10);
}

constexpr std::array<std::string_view, 4> gpu_backends = {"cuda", "rsmi", "nvml", "opencl"};

// The same Topology as load.cpp's Reader, over Tree instead of hwloc objects; each step names the
// hwloc call it stands for.
class Builder {
 public:
  explicit Builder(const Tree& tree) : tree_(tree), objs_(tree.objs) {
    allowed_ = intersect(parse_set(tree.root_allowed), parse_set(objs_[0].cpuset));
    int packages = 0;
    package_logical_.assign(objs_.size(), -1);
    for (size_t i = 0; i < objs_.size(); ++i) {
      if (objs_[i].kind == Kind::package) {
        package_logical_[i] = packages;
        ++packages;
        packages_.push_back({static_cast<int>(i), parse_set(objs_[i].cpuset)});
      }
    }
  }

  Topology build(std::string origin) {
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
  struct Package {
    int obj;
    Set cpuset;
  };
  struct NumaNode {
    int os_index;
    Set cpuset;
  };

  const Obj& at(int i) const { return objs_[static_cast<size_t>(i)]; }

  std::string info_of(const Obj& o, const char* key) const {
    for (uint32_t i = o.info_begin; i < o.info_end; ++i)
      if (tree_.infos[i].first == key) return unescape(tree_.infos[i].second);
    return {};
  }

  void read_numa(Topology& t) {
    long long highest = -1;  // the highest cpu of the nodes so far
    for (const Obj& n : objs_) {
      if (n.kind != Kind::numa) continue;
      Set set = parse_set(n.cpuset);
      if (!intersects(set, allowed_)) continue;
      t.numa_nodes.push_back(static_cast<int>(n.os_index));
      numa_below_.push_back(highest);
      if (!set.empty()) highest = std::max(highest, static_cast<long long>(set.back().hi));
      numa_.push_back({static_cast<int>(n.os_index), std::move(set)});
    }
  }

  std::vector<int> numa_of(const Set& cpuset) const {
    std::vector<int> nodes;
    for (const auto& n : numa_)
      if (intersects(n.cpuset, cpuset)) nodes.push_back(n.os_index);
    return nodes;
  }

  // hwloc_get_ancestor_obj_by_type
  int ancestor(int i, Kind kind) const {
    for (int p = at(i).parent; p >= 0; p = at(p).parent)
      if (at(p).kind == kind) return p;
    return -1;
  }

  // hwloc_get_non_io_ancestor_obj: the first object with a cpuset, itself included.
  int non_io_ancestor(int i) const {
    while (i >= 0 && !at(i).cpuset.data()) i = at(i).parent;
    return i;
  }

  // index_of() in load.cpp: the os_index, else the logical index.
  int package_index(int obj) const {
    const int logical = package_logical_[static_cast<size_t>(obj)];
    return at(obj).os_index == kUnknownIndex ? logical : static_cast<int>(at(obj).os_index);
  }

  void read_cores(Topology& t) {
    std::vector<int> slot(objs_.size(), -1);
    for (size_t i = 0; i < objs_.size(); ++i) {
      const Obj& pu = objs_[i];
      if (pu.kind != Kind::pu || !contains(allowed_, pu.os_index)) continue;
      const int core = ancestor(static_cast<int>(i), Kind::core);
      const int owner = core >= 0 ? core : static_cast<int>(i);
      int& s = slot[static_cast<size_t>(owner)];
      if (s < 0) {
        s = static_cast<int>(t.cores.size());
        Core c;
        const Set owner_set = parse_set(at(owner).cpuset);
        c.numa = first_numa(owner_set);
        const int package = ancestor(owner, Kind::package);
        c.package = package >= 0 ? package_index(package) : -1;
        t.cores.push_back(std::move(c));
      }
      t.cores[static_cast<size_t>(s)].pus.push_back(pu.os_index);
    }
  }

  // numa_of(set).front() without scanning every node for every core (102,400 cores x 128 nodes):
  // the node that matched last time answers again when it intersects and every node before it
  // lies wholly below the set, so none of those can intersect.
  int first_numa(const Set& set) {
    if (last_numa_ >= 0 && !set.empty() && intersects(numa_[static_cast<size_t>(last_numa_)].cpuset, set) &&
        static_cast<long long>(set.front().lo) > numa_below_[static_cast<size_t>(last_numa_)]) {
      return numa_[static_cast<size_t>(last_numa_)].os_index;
    }
    for (size_t k = 0; k < numa_.size(); ++k) {
      if (intersects(numa_[k].cpuset, set)) {
        last_numa_ = static_cast<int>(k);
        return numa_[k].os_index;
      }
    }
    return -1;
  }

  void read_gpus(Topology& t) {
    std::map<PciKey, std::pair<int, std::array<std::vector<int>, gpu_backends.size()>>> by_pci;
    for (size_t i = 0; i < objs_.size(); ++i) {
      const int backend = gpu_backend(objs_[i]);
      if (backend < 0) continue;
      const int pci = pci_parent(static_cast<int>(i));
      if (pci < 0) continue;
      auto& entry = by_pci[key(pci)];
      entry.first = pci;
      entry.second[static_cast<size_t>(backend)].push_back(static_cast<int>(i));
    }
    for (size_t i = 0; i < objs_.size(); ++i) {
      if (objs_[i].kind != Kind::pcidev) continue;
      const int pci = static_cast<int>(i);
      if (!by_pci.count(key(pci)) && is_gpu_pci_class(objs_[i])) by_pci[key(pci)].first = pci;
    }
    for (auto& [k, entry] : by_pci) {
      const int pci = entry.first;
      std::vector<int>* names = nullptr;
      for (auto& devices : entry.second)
        if (!names || devices.size() > names->size()) names = &devices;
      Gpu proto;
      proto.bus_id = bus_id(pci);
      const unsigned vendor = at(pci).vendor;
      proto.vendor = vendor == 0x10de ? "nvidia" : vendor == 0x1002 ? "amd" : "other";
      const int local = non_io_ancestor(pci);
      Set cpus;
      if (local >= 0) cpus = intersect(parse_set(at(local).cpuset), allowed_);
      proto.numa_nodes = numa_of(cpus);
      proto.local_cpus = to_list(cpus);
      if (!names || names->empty()) {
        proto.name = at(pci).pci_model.data() ? unescape(at(pci).pci_model)
                                              : fmt::format("{:04x}:{:04x}", vendor, at(pci).device);
        t.gpus.push_back(proto);
        gpu_objects_.push_back(pci);
        continue;
      }
      std::vector<std::pair<int, std::string>> named;
      for (int os : *names) named.emplace_back(os, unescape(at(os).name));
      std::sort(named.begin(), named.end(),
                [](const auto& a, const auto& b) { return name_number(a.second) < name_number(b.second); });
      for (auto& [os, name] : named) {
        Gpu gpu = proto;
        gpu.name = name;
        t.gpus.push_back(std::move(gpu));
        gpu_objects_.push_back(pci);
      }
    }
  }

  int gpu_backend(const Obj& o) const {
    if (o.kind != Kind::osdev || (o.osdev_type != kOsdevGpu && o.osdev_type != kOsdevCoproc)) return -1;
    if (!o.name.data()) return -1;
    for (size_t b = 0; b < gpu_backends.size(); ++b)
      if (starts_with(o.name, gpu_backends[b])) return static_cast<int>(b);
    return -1;
  }

  static bool is_gpu_pci_class(const Obj& pci) {
    if (pci.vendor == 0x10de) return pci.class_id == 0x0300 || pci.class_id == 0x0302;
    if (pci.vendor == 0x1002)
      return pci.class_id == 0x0300 || pci.class_id == 0x0302 || pci.class_id == 0x0380 || pci.class_id == 0x1200;
    return false;
  }

  int pci_parent(int os) const {
    for (int p = at(os).parent; p >= 0; p = at(p).parent) {
      if (at(p).kind == Kind::pcidev) return p;
      if (at(p).kind != Kind::osdev) return -1;
    }
    return -1;
  }

  PciKey key(int pci) const {
    const Obj& o = at(pci);
    return {o.domain, o.bus, o.dev, o.func};
  }

  std::string bus_id(int pci) const {
    const Obj& o = at(pci);
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", o.domain, o.bus, o.dev, o.func);
  }

  void read_nics(Topology& t) {
    std::map<PciKey, std::vector<std::string>> netdevs_by_pci;
    std::set<PciKey> fabric_functions;
    std::vector<std::pair<int, int>> plain;
    for (size_t i = 0; i < objs_.size(); ++i) {
      const Obj& os = objs_[i];
      if (os.kind != Kind::osdev) continue;
      const int pci = pci_parent(static_cast<int>(i));
      if (os.osdev_type == kOsdevNetwork && pci >= 0 && os.name.data()) {
        netdevs_by_pci[key(pci)].push_back(unescape(os.name));
        plain.emplace_back(static_cast<int>(i), pci);
      } else if (os.osdev_type == kOsdevOpenFabrics && os.name.data()) {
        add_nic(t, fabric_nic(os, pci), pci >= 0 ? pci : static_cast<int>(i));
        if (pci >= 0) fabric_functions.insert(key(pci));
      }
    }
    for (size_t i = 0; i < t.nics.size(); ++i) {
      const int obj = nic_objects_[i];
      if (at(obj).kind == Kind::pcidev) t.nics[i].netdevs = netdevs_by_pci[key(obj)];
    }
    for (auto [os, pci] : plain) {
      if (fabric_functions.count(key(pci))) continue;
      Nic nic;
      nic.name = unescape(at(os).name);
      const bool slingshot = at(pci).vendor == 0x17db || (at(os).subtype.data() && unescape(at(os).subtype) == "Slingshot");
      nic.kind = slingshot ? "slingshot" : "ethernet";
      nic.netdevs = {nic.name};
      add_nic(t, std::move(nic), pci);
    }
    sort_nics(t.nics, nic_objects_);
  }

  // An OpenFabrics device (IB, RoCE or EFA) with its ports from the PortNState infos (PortN... when
  // no state is given); pci is its PCI device, -1 when it has none.
  Nic fabric_nic(const Obj& os, int pci) const {
    Nic nic;
    nic.name = unescape(os.name);
    const bool efa = starts_with(nic.name, "rdmap") || starts_with(nic.name, "efa") ||
                     (pci >= 0 && at(pci).vendor == 0x1d0f);
    nic.kind = efa ? "efa" : "infiniband";
    std::vector<std::pair<std::string, std::string>> infos;
    for (uint32_t k = os.info_begin; k < os.info_end; ++k)
      infos.emplace_back(unescape(tree_.infos[k].first), unescape(tree_.infos[k].second));
    for (const auto& [name, value] : infos) {
      int port = 0, consumed = 0;
      if (std::sscanf(name.c_str(), "Port%dState%n", &port, &consumed) == 1 && name[static_cast<size_t>(consumed)] == '\0') {
        nic.ports.push_back(port);
        nic.port_states.push_back(std::atoi(value.c_str()));
      }
    }
    if (nic.ports.empty()) {
      std::set<int> seen;
      for (const auto& info : infos) {
        int port = 0;
        if (std::sscanf(info.first.c_str(), "Port%d", &port) == 1) seen.insert(port);
      }
      nic.ports.assign(seen.begin(), seen.end());
      nic.port_states.assign(nic.ports.size(), 0);
    }
    return nic;
  }

  void add_nic(Topology& t, Nic nic, int location) {
    if (at(location).kind == Kind::pcidev) nic.bus_id = bus_id(location);
    const int local = non_io_ancestor(location);
    if (local >= 0) nic.numa_nodes = numa_of(parse_set(at(local).cpuset));
    t.nics.push_back(std::move(nic));
    nic_objects_.push_back(location);
  }

  std::set<int> packages_of(int io) const {
    std::set<int> result;
    const int local = non_io_ancestor(io);
    if (local < 0) return result;
    const Set set = parse_set(at(local).cpuset);
    for (const auto& p : packages_)
      if (intersects(p.cpuset, set)) result.insert(package_index(p.obj));
    return result;
  }

  NicDistance distance(const Gpu& gpu, int gpu_obj, const Nic& nic, int nic_obj) const {
    std::vector<int> above_gpu;
    for (int p = gpu_obj; p >= 0; p = at(p).parent) above_gpu.push_back(p);
    int common = nic_obj;
    while (common >= 0 && std::find(above_gpu.begin(), above_gpu.end(), common) == above_gpu.end())
      common = at(common).parent;
    if (common >= 0) {
      const Kind k = at(common).kind;
      if (k == Kind::bridge || k == Kind::pcidev || k == Kind::osdev) {
        const bool host_bridge = k == Kind::bridge && at(common).bridge_upstream == 0;
        return host_bridge ? NicDistance::same_host_bridge : NicDistance::same_pci_switch;
      }
    }
    for (int n : gpu.numa_nodes)
      if (std::find(nic.numa_nodes.begin(), nic.numa_nodes.end(), n) != nic.numa_nodes.end())
        return NicDistance::same_numa;
    const auto a = packages_of(gpu_obj);
    const auto b = packages_of(nic_obj);
    for (int p : a)
      if (b.count(p)) return NicDistance::same_package;
    if (a.empty() && b.empty()) return NicDistance::same_package;
    return NicDistance::across_packages;
  }

  void read_distances(Topology& t) {
    t.nic_distance.resize(t.gpus.size());
    for (size_t g = 0; g < t.gpus.size(); ++g)
      for (size_t n = 0; n < t.nics.size(); ++n)
        t.nic_distance[g].push_back(distance(t.gpus[g], gpu_objects_[g], t.nics[n], nic_objects_[n]));
  }

  const Tree& tree_;
  const std::vector<Obj>& objs_;
  Set allowed_;
  std::vector<Package> packages_;
  std::vector<int> package_logical_;  // by object index; -1 for non-packages
  std::vector<NumaNode> numa_;
  std::vector<long long> numa_below_;  // [k]: highest cpu of numa_[0..k-1], -1 when none
  int last_numa_ = -1;
  std::vector<int> gpu_objects_;
  std::vector<int> nic_objects_;
};

}  // namespace

Topology build_topology(const Tree& tree, std::string origin) { return Builder(tree).build(std::move(origin)); }

}  // namespace ringrun::topology::native::xml
