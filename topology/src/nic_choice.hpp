// Which NICs ranks may be given; shared by the planner and the `ringrun topo` renderer so both
// name the same NIC.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

// Indexes into topo.nics: fabric NICs (InfiniBand/RoCE, EFA, Slingshot) with a working port, or
// the Ethernet NICs when there is no such fabric NIC.
std::vector<size_t> nic_candidates(const Topology& topo);

// The closest candidate of GPU `gpu` (the first one in NIC order on ties).
std::optional<size_t> closest_nic(const Topology& topo, size_t gpu);

}  // namespace ringrun::topology
