// Applying a slot's cpuset to the calling process (the task shim, before exec).
#include <hwloc.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

void bind_to_cpus(const std::vector<unsigned>& cpus, bool mem_bind_local) {
  if (cpus.empty()) return;
  auto fail = [&](const char* what) {
    throw TopologyError(fmt::format("ringrun: cannot bind to cpus {}: {}: {}; run with --bind none to skip binding",
                                    format_cpulist(cpus), what, std::strerror(errno)));
  };
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) fail("hwloc_topology_init");
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> topo(raw, hwloc_topology_destroy);
  // No I/O devices: binding needs only the CPUs, and loading stays in the milliseconds.
  if (hwloc_topology_load(raw) != 0) fail("hwloc_topology_load");
  std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)> set(hwloc_bitmap_alloc(), hwloc_bitmap_free);
  for (unsigned cpu : cpus) hwloc_bitmap_set(set.get(), cpu);
  if (hwloc_set_cpubind(raw, set.get(), HWLOC_CPUBIND_PROCESS) != 0) fail("hwloc_set_cpubind");
  if (mem_bind_local && hwloc_set_membind(raw, set.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_PROCESS) != 0) {
    fail("hwloc_set_membind");
  }
}

}  // namespace ringrun::topology
