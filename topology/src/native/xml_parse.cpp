// The XML side of the native reader: the subset of XML hwloc 2.x writes, scanned once with memchr
// over the mapping, each <object> checked and appended to the flat Tree with the attributes the
// builder needs (PCI ids, OS-device types and infos). Anything unusual answers false.
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "xml_tree.hpp"

namespace ringrun::topology::native::xml {

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

bool parse_uint(std::string_view v, unsigned& out, int base) {
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

namespace {

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
    while (true) {
      const char* lt = static_cast<const char*>(std::memchr(p_, '<', static_cast<size_t>(end_ - p_)));
      if (!lt) break;
      if (closed_topology_) {
        // Only whitespace and comments may follow </topology>.
        if (!starts(lt, "<!--")) return false;
      }
      p_ = lt + 1;
      if (p_ >= end_) return false;
      const bool ok = *p_ == '?'   ? skip_past("?>")
                      : *p_ == '!' ? skip_declaration()
                      : *p_ == '/' ? close_element()
                                   : open_element(tree);
      if (!ok) return false;
    }
    return seen_topology_ && closed_topology_ && !tree.objs.empty();
  }

 private:
  struct Attrs;

  // After "<!": a comment, or the DOCTYPE line.
  bool skip_declaration() {
    if (starts(p_, "!--")) return skip_past("-->");
    // <!DOCTYPE topology SYSTEM "hwloc2.dtd">; an internal subset could define entities.
    const char* gt = find('>');
    if (!gt || std::memchr(p_, '[', static_cast<size_t>(gt - p_))) return false;
    p_ = gt + 1;
    return true;
  }

  // After "</": the end tag must close the innermost open element.
  bool close_element() {
    ++p_;
    const std::string_view name = read_name();
    const char* gt = find('>');
    if (!gt || elements_.empty()) return false;
    p_ = gt + 1;
    const bool is_object = elements_.back();
    elements_.pop_back();
    if (is_object != (name == "object")) return false;
    if (is_object) objects_.pop_back();
    if (name == "topology") {
      if (!elements_.empty()) return false;
      closed_topology_ = true;
    }
    return true;
  }

  // After "<": <topology> first and once, <object>s inside it or inside each other, their <info>s.
  bool open_element(Tree& tree) {
    const std::string_view name = read_name();
    if (name.empty()) return false;
    if (!seen_topology_) {
      if (name != "topology") return false;
      seen_topology_ = true;
    }
    Attrs attrs;
    bool self_closing = false;
    if (!read_attrs(attrs, self_closing)) return false;
    if (name == "topology") {
      if (!elements_.empty() || self_closing) return false;
      // hwloc 1.x exports have no version (and a different tree); those go to hwloc.
      const std::string_view version = attrs.get("version");
      if (version.size() < 2 || version[0] != '2' || version[1] != '.') return false;
    } else if (name == "object") {
      if (elements_.empty() || (!objects_.empty() && !elements_.back())) return false;
      if (!add_object(tree, attrs, objects_.empty() ? -1 : objects_.back())) return false;
      if (!self_closing) objects_.push_back(static_cast<int>(tree.objs.size() - 1));
    } else if (name == "info" && !elements_.empty() && elements_.back()) {
      if (!add_info(tree, tree.objs[static_cast<size_t>(objects_.back())], attrs)) return false;
    }
    if (!self_closing) elements_.push_back(name == "object");
    return !elements_.empty();  // empty: a second root element
  }

  // An OS device keeps all its infos (NIC ports); a PCI device only its model name.
  static bool add_info(Tree& tree, Obj& o, const Attrs& attrs) {
    const std::string_view info = attrs.get("name");
    if (o.kind == Kind::osdev) {
      if (tree.infos.size() != o.info_end) return false;  // infos come before child objects
      tree.infos.emplace_back(info, attrs.get("value"));
      o.info_end = static_cast<uint32_t>(tree.infos.size());
    } else if (o.kind == Kind::pcidev && info == "PCIDevice") {
      o.pci_model = attrs.get("value");
    }
    return true;
  }

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
  bool seen_topology_ = false, closed_topology_ = false;
  std::vector<bool> elements_;  // open elements: true for <object>
  std::vector<int> objects_;    // open <object>s, indexes into tree.objs
};

}  // namespace

bool parse_tree(const char* begin, const char* end, Tree& tree) { return Parser(begin, end).parse(tree); }

}  // namespace ringrun::topology::native::xml
