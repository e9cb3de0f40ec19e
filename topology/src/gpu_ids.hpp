// The GPUs plan_node hands out, shared by the planner and its callers' GPU counts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

struct UsableGpu {
  std::string id;            // the value for the vendor's device variable
  std::optional<int> index;  // into Topology::gpus, when the id names one of them
};

// In the order local ranks get them: the inherited list of the planned vendor when given, else that
// vendor's GPUs by device id.
std::vector<UsableGpu> usable_gpus(const Topology& topo, const NodeOptions& options);

}  // namespace ringrun::topology
