// A node's hardware as hwloc sees it (live or from an XML export), and the pure planning of the
// ranks on one node: which GPU, which cores, which NIC, which NCCL variables.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ringrun/gpu_libraries.hpp>

namespace ringrun::topology {

// A file or machine hwloc could not read; what() names the file and hwloc's reason.
struct TopologyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Distance from a GPU to a NIC, nearest first (the order NCCL's PIX/PXB/PHB/SYS follows).
enum class NicDistance { same_pci_switch, same_host_bridge, same_numa, same_package, across_packages };
const char* to_string(NicDistance);

struct Gpu {
  std::string bus_id;                // "0000:4e:00.0"
  std::string vendor;                // "nvidia", "amd"
  std::string name;                  // OS device name or model when known ("cuda0", "rsmi3")
  std::vector<int> numa_nodes;       // OS indexes
  std::vector<unsigned> local_cpus;  // PU OS indexes local to the GPU (allowed ones only)
};

struct Nic {
  std::string name;                  // "mlx5_0", "rdmap197s0", "hsi0", "eth0"
  std::string kind;                  // "infiniband" (OpenFabrics), "efa", "ethernet", "slingshot"
  std::vector<std::string> netdevs;  // Linux interfaces on the same PCI function
  std::vector<int> ports;            // OpenFabrics ports (1-based), empty for plain netdevs
  std::string bus_id;
  std::vector<int> numa_nodes;
  // hwloc's "Port<N>State" for each entry of `ports` (IB port states: 4 = ACTIVE, 1 = DOWN);
  // 0 when hwloc did not report it.
  std::vector<int> port_states;
};

// The first ACTIVE port of an OpenFabrics NIC; else its first port when hwloc reported no states;
// nullopt for plain netdevs or when every reported port is down.
std::optional<int> first_active_port(const Nic&);

struct Core {
  std::vector<unsigned> pus;  // hyperthread siblings, allowed ones only
  int numa = -1;              // OS index of its NUMA node
  int package = -1;
};

struct Topology {
  std::string origin;                 // "live" or the XML file's path, for messages
  std::vector<Gpu> gpus;              // in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::vector<Nic> nics;
  std::vector<Core> cores;            // allowed cores only, in logical order
  std::vector<int> numa_nodes;        // OS indexes of NUMA nodes that have cores
  // nic_distance[g][n]: distance from gpus[g] to nics[n].
  std::vector<std::vector<NicDistance>> nic_distance;
};

Topology load_live();
// An hwloc XML export; a value "synthetic:DESCRIPTION" builds hwloc's synthetic topology instead
// (e.g. "synthetic:pack:16 numa:8 core:800 pu:1"; no GPUs or NICs), for tests and benchmarks.
// Reads hwloc 2.x exports and plain "type:count" synthetic descriptions natively (linear; hwloc
// takes ~25 s for 100k cores) and everything else through hwloc. RINGRUN_TOPOLOGY_LOADER=hwloc
// forces hwloc, for comparisons and benchmarks.
Topology load_xml(const std::string& path);

// The hwloc reading of load_xml: the reference the native reader is checked against.
Topology load_xml_hwloc(const std::string& path);
// The native reading of load_xml: nullopt when the file or description is not one it handles
// (then load_xml asks hwloc); never throws for a bad file.
std::optional<Topology> load_xml_native(const std::string& path);

struct NodeOptions {
  int gpus_per_rank = 1;                   // 0: CPU-only ranks, no GPU given
  bool bind = true;                        // false: --bind none, no cpuset
  std::optional<int> cpus_per_rank;        // caps the cores of each rank
  std::optional<std::vector<std::string>> visible_gpus;  // inherited CUDA_VISIBLE_DEVICES or
                                           // SLURM's GPU list: rank i gets an index into this
  // Inherited ROCR_VISIBLE_DEVICES (else HIP_VISIBLE_DEVICES): on an AMD node it takes the place
  // of visible_gpus (which stays the fallback: HIP also reads CUDA_VISIBLE_DEVICES).
  std::optional<std::vector<std::string>> visible_amd_gpus;
};

// One rank's share of a node.
struct LocalSlot {
  std::optional<std::string> gpu;          // the value for the vendor's device variable
  std::string gpu_vendor;                  // with `gpu`: "amd" (ROCR_VISIBLE_DEVICES), else CUDA's
  std::optional<int> gpu_index;            // index into Topology::gpus
  std::vector<unsigned> cpus;              // PU OS indexes; empty when not bound
  std::optional<std::string> nic;          // closest NIC's name
  std::vector<int> numa_nodes;             // NUMA nodes (OS indexes) of `cpus`, for memory binding
  std::map<std::string, std::string> env;  // NCCL_* for this rank
  // Filled by the caller (it needs sysfs): roce_gid_index of the slot's HCA port, for reports.
  std::optional<int> roce_gid_index;
};

// The vendor whose GPUs a node's ranks get: "nvidia" when it has any NVIDIA GPU (the usual mix
// is an AMD integrated GPU beside NVIDIA cards), else "amd" when it has AMD GPUs, else the vendor
// of its first GPU ("" without GPUs). GPUs of other vendors are given to no rank.
std::string planned_gpu_vendor(const Topology& topo);

// How many GPUs plan_node can give this node's ranks: the planned vendor's inherited list
// (NodeOptions) when given, else the planned vendor's GPUs.
size_t usable_gpu_count(const Topology& topo, const NodeOptions& options);

// Pure: the slots of `local_size` ranks on a node with this topology. Throws std::invalid_argument
// with a one-line message (e.g. more ranks than GPUs, naming both counts).
std::vector<LocalSlot> plan_node(const Topology& topo, int local_size, const NodeOptions& options);

// Binds the calling process to `cpus` (PU OS indexes; sched_setaffinity) and, when
// mem_numa_nodes is not empty, its memory to those NUMA nodes (set_mempolicy, MPOL_BIND). The task
// shim calls this before exec. Empty cpus: nothing. Throws TopologyError naming the cpus or nodes,
// the system's reason and the option that skips it.
void bind_to_cpus(const std::vector<unsigned>& cpus, const std::vector<int>& mem_numa_nodes = {});

// "0-3,8,10-11"
std::string format_cpulist(const std::vector<unsigned>& cpus);
// The inverse: "0-3,8" -> {0,1,2,3,8}, sorted and unique; throws std::invalid_argument naming the
// list and the column of the error.
std::vector<unsigned> parse_cpulist(const std::string& list);

// The GID index NCCL's automatic selection (NCCL >= 2.21) would use on a RoCE port: the first
// valid IPv4-mapped GID (::ffff:a.b.c.d) of type "RoCE v2" with a netdev, read from
// <sysfs_root>/class/infiniband/<hca>/ports/<port>/{link_layer,gids/N,gid_attrs/types/N,
// gid_attrs/ndevs/N}. nullopt for an InfiniBand link layer, a missing port or no such GID.
// sysfs_root is "/sys" on a real machine; tests pass fixture trees.
std::optional<int> roce_gid_index(const std::string& sysfs_root, const std::string& hca, int port);

// roce_gid_index of every OpenFabrics NIC's port the plan would use (first_active_port, else 1),
// keyed "mlx5_0:1" as in NCCL_IB_HCA; ports without such a GID are absent.
std::map<std::string, int> roce_gid_indexes(const std::string& sysfs_root, const Topology& topo);

// The NCCL a rank on this host would load (the search of ringrun/gpu_libraries.hpp in `context`:
// the launcher's folder and the job's environment), then ncclGetVersion: its version
// code (2.21.5 -> 22105) and the file the loader opened; no version when none loads. A dlopen of
// libnccl costs a launch 2-4 ms: the launcher caches this (launcher/src/facts/cache.hpp).
struct NcclLibrary {
  std::optional<int> version;
  std::string path;
};
NcclLibrary find_nccl_library(const gpu::SearchContext& context);

// `ringrun topo`: one row per GPU (index, bus id, NUMA, cores, closest NIC and its distance class),
// then, when slots are given, one row per local rank (GPU, cpus, NIC, NCCL variables).
std::string render_topology_table(const Topology&, const std::vector<LocalSlot>* slots = nullptr);
// The same as one JSON object: {"origin", "gpus": [...], "nics": [...], "numa_nodes", "cores",
// "slots": [...] when given}.
std::string topology_to_json(const Topology&, const std::vector<LocalSlot>* slots = nullptr);

}  // namespace ringrun::topology
