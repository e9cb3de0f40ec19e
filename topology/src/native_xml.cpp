// hwloc 2.x XML exports read without hwloc. hwloc's import inserts every object by cpuset and so is
// quadratic: a 102,400-core export takes tens of seconds. This reader makes one pass over the
// mmap'd file, keeps a flat array of the objects it needs (attribute values stay views into the
// mapping; cpusets are parsed only for the objects that are asked about), then derives the
// Topology with exactly the rules of load.cpp's Reader. test_native.cpp checks that both agree
// on every fixture; anything this reader does not know makes it answer nullopt so hwloc decides.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "native.hpp"

namespace ringrun::topology::native {
namespace {

enum class Kind : uint8_t { machine, package, core, pu, numa, bridge, pcidev, osdev, misc, other };

// hwloc_obj_osdev_type_e as written in the XML (osdev_type="N"); hwloc 2.x keeps these values.
constexpr int kOsdevGpu = 1, kOsdevNetwork = 2, kOsdevOpenFabrics = 3, kOsdevCoproc = 5, kOsdevMax = 5;
constexpr unsigned kUnknownIndex = UINT_MAX;

struct Obj {
  Kind kind = Kind::other;
  int parent = -1;
  unsigned os_index = kUnknownIndex;
  std::string_view cpuset;  // raw attribute; data() == nullptr when absent (I/O and Misc objects)
  std::string_view name;
  std::string_view subtype;
  int osdev_type = -1;
  bool has_pci = false;
  unsigned domain = 0, bus = 0, dev = 0, func = 0, class_id = 0, vendor = 0, device = 0;
  int bridge_upstream = -1;  // hwloc_obj_bridge_type_e of the upstream side; 0 = host
  std::string_view pci_model;  // info "PCIDevice"
  uint32_t info_begin = 0, info_end = 0;  // OS devices' infos, in Tree::infos
};

struct Tree {
  std::vector<Obj> objs;  // file order = hwloc's depth-first logical order
  std::vector<std::pair<std::string_view, std::string_view>> infos;
  std::string_view root_allowed;
};

// XML character references in attribute values (hwloc escapes & < > " and control characters).
std::string unescape(std::string_view v) {
  if (v.find('&') == std::string_view::npos) return std::string(v);
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '&') {
      out += v[i];
      continue;
    }
    const size_t semi = v.find(';', i);
    if (semi == std::string_view::npos) throw std::runtime_error("unterminated entity");
    const std::string_view ent = v.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x';
      const long code = std::strtol(std::string(ent.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      if (code <= 0 || code > 0x7f) throw std::runtime_error("non-ASCII character reference");
      out += static_cast<char>(code);
    } else {
      throw std::runtime_error("unknown entity");
    }
    i = semi;
  }
  return out;
}

bool parse_uint(std::string_view v, unsigned& out, int base = 10) {
  if (v.empty()) return false;
  unsigned long value = 0;
  for (char c : v) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    value = value * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (value > UINT_MAX) return false;
  }
  out = static_cast<unsigned>(value);
  return true;
}

// A cpuset as sorted, disjoint, non-adjacent inclusive ranges: a PU of a 102,400-PU machine is
// one range instead of a 12.8 kB bitmap. hi == UINT_MAX stands for hwloc's infinite sets.
struct Range {
  unsigned lo, hi;
};
using Set = std::vector<Range>;

void add_bits(Set& set, unsigned lo, unsigned hi) {
  if (!set.empty() && set.back().hi != UINT_MAX && set.back().hi + 1 == lo) set.back().hi = hi;
  else set.push_back({lo, hi});
}

// hwloc's bitmap string: 32-bit words, most significant first, "0x%08x" each, zero words left
// empty (",,"), "0x0" for the empty set and a leading "0xf...f" when every higher bit is set.
Set parse_set(std::string_view s) {
  struct Word {
    size_t field;  // from the left
    uint32_t value;
  };
  std::vector<Word> words;
  bool infinite = false;
  size_t field = 0;
  size_t i = 0;
  while (i <= s.size()) {
    // Runs of empty words are most of a big machine's strings: skip them eight at a time.
    while (i + 8 <= s.size() && std::memcmp(s.data() + i, ",,,,,,,,", 8) == 0) {
      i += 8;
      field += 8;
    }
    size_t comma = s.find(',', i);
    if (comma == std::string_view::npos) comma = s.size();
    const std::string_view text = s.substr(i, comma - i);
    if (!text.empty()) {
      if (text == "0xf...f") {
        if (field != 0) throw std::runtime_error("infinite mark not first");
        infinite = true;
      } else {
        unsigned value = 0;
        if (text.size() < 3 || text.size() > 10 || text[0] != '0' || text[1] != 'x' ||
            !parse_uint(text.substr(2), value, 16))
          throw std::runtime_error("bad cpuset word");
        if (value) words.push_back({field, value});
      }
    }
    ++field;
    i = comma + 1;
  }
  const size_t fields = field;
  Set set;
  for (auto it = words.rbegin(); it != words.rend(); ++it) {
    const unsigned long base = 32ul * (fields - 1 - it->field);
    if (base + 31 >= UINT_MAX) throw std::runtime_error("cpuset too large");
    if (it->value == 0xffffffffu) {
      add_bits(set, static_cast<unsigned>(base), static_cast<unsigned>(base + 31));
      continue;
    }
    for (unsigned b = 0; b < 32; ++b)
      if (it->value >> b & 1u) add_bits(set, static_cast<unsigned>(base + b), static_cast<unsigned>(base + b));
  }
  if (infinite) add_bits(set, static_cast<unsigned>(32ul * (fields - 1)), UINT_MAX);
  return set;
}

bool intersects(const Set& a, const Set& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].hi < b[j].lo) ++i;
    else if (b[j].hi < a[i].lo) ++j;
    else return true;
  }
  return false;
}

Set intersect(const Set& a, const Set& b) {
  Set out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const unsigned lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].hi < b[j].hi) ++i;
    else ++j;
  }
  return out;
}

bool contains(const Set& set, unsigned bit) {
  auto it = std::upper_bound(set.begin(), set.end(), bit, [](unsigned v, const Range& r) { return v < r.lo; });
  return it != set.begin() && std::prev(it)->hi >= bit;
}

std::vector<unsigned> to_list(const Set& set) {
  std::vector<unsigned> out;
  for (const auto& r : set) {
    if (r.hi == UINT_MAX) throw std::runtime_error("infinite cpuset");
    for (unsigned v = r.lo;; ++v) {
      out.push_back(v);
      if (v == r.hi) break;
    }
  }
  return out;
}

bool kind_of(std::string_view type, Kind& kind) {
  static const std::map<std::string_view, Kind, std::less<>> kinds = {
      {"Machine", Kind::machine}, {"Package", Kind::package}, {"Core", Kind::core},    {"PU", Kind::pu},
      {"NUMANode", Kind::numa},   {"Bridge", Kind::bridge},   {"PCIDev", Kind::pcidev}, {"OSDev", Kind::osdev},
      {"Misc", Kind::misc},       {"Die", Kind::other},       {"Group", Kind::other},  {"MemCache", Kind::other},
      {"L1Cache", Kind::other},   {"L2Cache", Kind::other},   {"L3Cache", Kind::other}, {"L4Cache", Kind::other},
      {"L5Cache", Kind::other},   {"L1iCache", Kind::other},  {"L2iCache", Kind::other}, {"L3iCache", Kind::other}};
  const auto it = kinds.find(type);
  if (it == kinds.end()) return false;
  kind = it->second;
  return true;
}

// pci_busid="0000:4e:00.0", pci_type="0302 [10de:2330] [10de:16c1] a1" (hwloc's own formats).
bool parse_pci(Obj& o, std::string_view busid, std::string_view type) {
  const std::string b(busid), t(type);
  int n = 0;
  if (std::sscanf(b.c_str(), "%x:%x:%x.%x%n", &o.domain, &o.bus, &o.dev, &o.func, &n) != 4 ||
      static_cast<size_t>(n) != b.size())
    return false;
  if (std::sscanf(t.c_str(), "%x [%x:%x]", &o.class_id, &o.vendor, &o.device) != 3) return false;
  o.has_pci = true;
  return true;
}

class Parser {
 public:
  Parser(const char* begin, const char* end) : p_(begin), end_(end) {}

  // False for anything outside the subset of XML hwloc 2.x writes.
  bool parse(Tree& tree) {
    bool seen_topology = false, closed_topology = false;
    std::vector<bool> elements;  // open elements: true for <object>
    std::vector<int> objects;    // open <object>s, indexes into tree.objs
    while (true) {
      const char* lt = static_cast<const char*>(std::memchr(p_, '<', static_cast<size_t>(end_ - p_)));
      if (!lt) break;
      if (closed_topology) {
        // Only whitespace and comments may follow </topology>.
        if (!starts(lt, "<!--")) return false;
      }
      p_ = lt + 1;
      if (p_ >= end_) return false;
      if (*p_ == '?') {
        if (!skip_past("?>")) return false;
        continue;
      }
      if (*p_ == '!') {
        if (starts(p_, "!--")) {
          if (!skip_past("-->")) return false;
        } else {
          // <!DOCTYPE topology SYSTEM "hwloc2.dtd">; an internal subset could define entities.
          const char* gt = find('>');
          if (!gt || std::memchr(p_, '[', static_cast<size_t>(gt - p_))) return false;
          p_ = gt + 1;
        }
        continue;
      }
      if (*p_ == '/') {
        ++p_;
        const std::string_view name = read_name();
        const char* gt = find('>');
        if (!gt || elements.empty()) return false;
        p_ = gt + 1;
        const bool is_object = elements.back();
        elements.pop_back();
        if (is_object != (name == "object")) return false;
        if (is_object) objects.pop_back();
        if (name == "topology") {
          if (!elements.empty()) return false;
          closed_topology = true;
        }
        continue;
      }
      const std::string_view name = read_name();
      if (name.empty()) return false;
      if (!seen_topology) {
        if (name != "topology") return false;
        seen_topology = true;
      }
      Attrs attrs;
      bool self_closing = false;
      if (!read_attrs(attrs, self_closing)) return false;
      if (name == "topology") {
        if (!elements.empty() || self_closing) return false;
        // hwloc 1.x exports have no version (and a different tree); those go to hwloc.
        const std::string_view version = attrs.get("version");
        if (version.size() < 2 || version[0] != '2' || version[1] != '.') return false;
      } else if (name == "object") {
        if (elements.empty() || (!objects.empty() && !elements.back())) return false;
        if (!add_object(tree, attrs, objects.empty() ? -1 : objects.back())) return false;
        if (!self_closing) objects.push_back(static_cast<int>(tree.objs.size() - 1));
      } else if (name == "info" && !elements.empty() && elements.back()) {
        Obj& o = tree.objs[static_cast<size_t>(objects.back())];
        const std::string_view info = attrs.get("name");
        if (o.kind == Kind::osdev) {
          if (tree.infos.size() != o.info_end) return false;  // infos come before child objects
          tree.infos.emplace_back(info, attrs.get("value"));
          o.info_end = static_cast<uint32_t>(tree.infos.size());
        } else if (o.kind == Kind::pcidev && info == "PCIDevice") {
          o.pci_model = attrs.get("value");
        }
      }
      if (!self_closing) elements.push_back(name == "object");
      if (elements.empty()) return false;  // a second root element
    }
    return seen_topology && closed_topology && !tree.objs.empty();
  }

 private:
  struct Attrs {
    std::array<std::pair<std::string_view, std::string_view>, 16> items;
    size_t count = 0;
    bool overflow = false;
    std::string_view get(std::string_view key) const {
      for (size_t i = 0; i < count; ++i)
        if (items[i].first == key) return items[i].second;
      return {};
    }
  };

  static bool starts(const char* p, const char* prefix) { return std::strncmp(p, prefix, std::strlen(prefix)) == 0; }

  const char* find(char c) const {
    return static_cast<const char*>(std::memchr(p_, c, static_cast<size_t>(end_ - p_)));
  }

  bool skip_past(std::string_view marker) {
    const std::string_view rest(p_, static_cast<size_t>(end_ - p_));
    const size_t at = rest.find(marker);
    if (at == std::string_view::npos) return false;
    p_ += at + marker.size();
    return true;
  }

  std::string_view read_name() {
    const char* start = p_;
    while (p_ < end_ && (std::isalnum(static_cast<unsigned char>(*p_)) || *p_ == '_' || *p_ == '-' || *p_ == ':')) ++p_;
    return {start, static_cast<size_t>(p_ - start)};
  }

  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }

  // Every attribute is kept (as views) up to 16, enough for any hwloc object; more is unusual, so
  // the file goes to hwloc.
  bool read_attrs(Attrs& attrs, bool& self_closing) {
    while (true) {
      skip_space();
      if (p_ >= end_) return false;
      if (*p_ == '>') {
        ++p_;
        return true;
      }
      if (*p_ == '/') {
        if (p_ + 1 >= end_ || p_[1] != '>') return false;
        p_ += 2;
        self_closing = true;
        return true;
      }
      const std::string_view key = read_name();
      if (key.empty() || p_ + 1 >= end_ || *p_ != '=' || (p_[1] != '"' && p_[1] != '\'')) return false;
      const char quote = p_[1];
      p_ += 2;
      const char* close = find(quote);
      if (!close) return false;
      const std::string_view value(p_, static_cast<size_t>(close - p_));
      if (value.find('<') != std::string_view::npos) return false;
      p_ = close + 1;
      if (attrs.count == attrs.items.size()) return false;
      attrs.items[attrs.count++] = {key, value};
    }
  }

  static bool add_object(Tree& tree, const Attrs& a, int parent) {
    Obj o;
    if (!kind_of(a.get("type"), o.kind)) return false;
    o.parent = parent;
    if (parent < 0 && o.kind != Kind::machine) return false;
    if (parent >= 0 && o.kind == Kind::machine) return false;
    const std::string_view os = a.get("os_index");
    if (os.data() && !parse_uint(os, o.os_index)) return false;
    o.cpuset = a.get("cpuset");
    if (parent < 0) {
      tree.root_allowed = a.get("allowed_cpuset");
      if (!o.cpuset.data() || !tree.root_allowed.data()) return false;
    }
    const bool io = o.kind == Kind::bridge || o.kind == Kind::pcidev || o.kind == Kind::osdev;
    // hwloc gives every CPU-side object a cpuset and no I/O or Misc object one; a file that does
    // otherwise is hwloc's to judge.
    if (io || o.kind == Kind::misc ? o.cpuset.data() != nullptr : o.cpuset.data() == nullptr) return false;
    if (o.kind == Kind::pu && o.os_index == kUnknownIndex) return false;
    o.name = a.get("name");
    o.subtype = a.get("subtype");
    if (o.kind == Kind::osdev) {
      unsigned type = 0;
      if (!parse_uint(a.get("osdev_type"), type) || type > kOsdevMax) return false;
      o.osdev_type = static_cast<int>(type);
    }
    const std::string_view busid = a.get("pci_busid");
    if (o.kind == Kind::pcidev && !parse_pci(o, busid, a.get("pci_type"))) return false;
    if (o.kind == Kind::bridge) {
      unsigned up = 0, down = 0;
      const std::string bt(a.get("bridge_type"));
      if (std::sscanf(bt.c_str(), "%u-%u", &up, &down) != 2) return false;
      o.bridge_upstream = static_cast<int>(up);
      if (busid.data() && !parse_pci(o, busid, a.get("pci_type"))) return false;
    }
    o.info_begin = o.info_end = static_cast<uint32_t>(tree.infos.size());
    tree.objs.push_back(o);
    return true;
  }

  const char* p_;
  const char* end_;
};

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
        add_nic(t, std::move(nic), pci >= 0 ? pci : static_cast<int>(i));
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
    std::vector<size_t> order(t.nics.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::tie(t.nics[a].bus_id, t.nics[a].name) < std::tie(t.nics[b].bus_id, t.nics[b].name);
    });
    std::vector<Nic> nics;
    std::vector<int> objects;
    for (size_t i : order) {
      nics.push_back(std::move(t.nics[i]));
      objects.push_back(nic_objects_[i]);
    }
    t.nics = std::move(nics);
    nic_objects_ = std::move(objects);
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

// A read-only private mapping of the whole file, unmapped on scope exit.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      size_ = static_cast<size_t>(st.st_size);
      // MAP_POPULATE: the whole file is read anyway; faulting it in up front is cheaper than
      // one fault per page during the scan.
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const char*>(p);
        ::madvise(p, size_, MADV_SEQUENTIAL);
      }
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::optional<Topology> read_xml(const std::string& path) {
  Mapping file(path);
  if (!file.data()) return std::nullopt;
  try {
    Tree tree;
    Parser parser(file.data(), file.data() + file.size());
    if (!parser.parse(tree)) return std::nullopt;
    return Builder(tree).build(path);
  } catch (const std::exception&) {
    // A value this reader cannot interpret (bad cpuset, unknown entity): hwloc decides.
    return std::nullopt;
  }
}

}  // namespace ringrun::topology::native
