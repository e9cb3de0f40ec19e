// The flat object tree of an hwloc 2.x XML export: xml_parse.cpp fills it in one pass over
// the mapped file (attribute values stay views into the mapping), xml_build.cpp derives the
// Topology from it. Private to topology/.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ringrun/topology.hpp"

namespace ringrun::topology::native::xml {

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

// Fills tree from the file's bytes. False for anything outside the subset of XML hwloc 2.x writes;
// throws std::runtime_error for a value it cannot interpret.
bool parse_tree(const char* begin, const char* end, Tree& tree);

// The Topology with exactly the rules of load.cpp's Reader; throws std::runtime_error for a value
// it cannot interpret (a bad cpuset, an unknown entity).
Topology build_topology(const Tree& tree, std::string origin);

// XML character references in attribute values (hwloc escapes & < > " and control characters).
std::string unescape(std::string_view v);
// A whole unsigned number in base 10 or 16; false when v is empty, has another character or overflows.
bool parse_uint(std::string_view v, unsigned& out, int base = 10);

}  // namespace ringrun::topology::native::xml
