// NCCL facts of this host that the pure plans need: the version of the NCCL a rank would load,
// and the RoCE GID index of each HCA port (sysfs).
#include <string>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

NcclLibrary find_nccl_library(const gpu::SearchContext& context) {
  // Lazy: only ncclGetVersion is called; binding all of libnccl's symbols costs a launch ~0.5 ms.
  gpu::Lookup lookup = gpu::find(gpu::Library::nccl, context, /*lazy=*/true);
  if (!lookup.found) return {};
  NcclLibrary found{lookup.found->version, lookup.found->path};
  gpu::release(*lookup.found);
  return found;
}

std::map<std::string, int> roce_gid_indexes(const std::string& sysfs_root, const Topology& topo) {
  std::map<std::string, int> indexes;
  for (const Nic& nic : topo.nics) {
    if (nic.kind != "infiniband") continue;
    const int port = first_active_port(nic).value_or(1);
    if (auto index = roce_gid_index(sysfs_root, nic.name, port))
      indexes.emplace(nic.name + ":" + std::to_string(port), *index);
  }
  return indexes;
}

}  // namespace ringrun::topology
