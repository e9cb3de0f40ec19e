// This host's topology through a per-node cache: the task shim starts once per rank on every step,
// and a live hwloc load scans PCI (config space reads trap to the hypervisor on VMs: 2-8 ms each).
#pragma once

#include "ringrun/topology.hpp"

namespace ringrun::topology {

// load_live(), read from an hwloc XML export kept in /tmp/ringrun-UID/topology-HOST-BOOTID-HWLOC.xml
// (written by the first call on a node after boot; a file that is not ours, or that hwloc rejects,
// is ignored). The cache holds every PU (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED); the CPUs and
// NUMA nodes this process may use are read from the OS at each load, as load_live() does.
// Single-threaded callers only (it sets HWLOC_PLUGINS_PATH while hwloc starts).
Topology load_live_cached();

}  // namespace ringrun::topology
