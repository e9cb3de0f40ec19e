// The order NICs are listed in (and ranks given them): PCI bus order, then name. Shared by both
// topology readers, hwloc's (load.cpp) and the native XML one (native/xml_build.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

// Sorts nics, keeping `handles` (each reader's object for a NIC, index for index) aligned.
template <typename Handle>
void sort_nics(std::vector<Nic>& nics, std::vector<Handle>& handles) {
  std::vector<std::size_t> order(nics.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(nics[a].bus_id, nics[a].name) < std::tie(nics[b].bus_id, nics[b].name);
  });
  std::vector<Nic> sorted;
  std::vector<Handle> sorted_handles;
  for (std::size_t i : order) {
    sorted.push_back(std::move(nics[i]));
    sorted_handles.push_back(handles[i]);
  }
  nics = std::move(sorted);
  handles = std::move(sorted_handles);
}

}  // namespace ringrun::topology
