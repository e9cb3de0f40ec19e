// The readers that build a Topology without hwloc (hwloc's XML import and synthetic generation
// are quadratic in the object count: 25 s for 100k cores). Private to topology/.
#pragma once

#include <optional>
#include <string>

#include "ringrun/topology.hpp"

namespace ringrun::topology::native {

// An hwloc 2.x XML export read in one pass over the mmap'd file. nullopt when the file is anything
// else (hwloc 1.x, a construct this reader does not know, malformed): the caller then asks hwloc,
// which either reads it or says why not.
std::optional<Topology> read_xml(const std::string& path);

// A synthetic description made only of "type:count" levels (pack/numa/l3/l2/l1/core/pu, hwloc's
// spellings), built directly; nullopt for anything else (attributes, os_index lists, ...).
std::optional<Topology> read_synthetic(const std::string& description, const std::string& origin);

}  // namespace ringrun::topology::native
