// NCCL facts of this host that the pure plans need: the version of the NCCL a rank would load,
// and the RoCE GID index of each HCA port (sysfs).
#include <dlfcn.h>
#include <link.h>

#include <string>

#include "ringrun/topology.hpp"

namespace ringrun::topology {

NcclLibrary find_nccl_library() {
  // The loader's search path first (LD_LIBRARY_PATH, ld.so.cache), then where CUDA installs it.
  for (const char* library : {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"}) {
    // Lazy: only ncclGetVersion is called; binding all of libnccl's symbols costs a launch ~0.5 ms.
    void* handle = ::dlopen(library, RTLD_LAZY | RTLD_LOCAL);
    if (!handle) continue;
    NcclLibrary found;
    using GetVersion = int (*)(int*);  // ncclResult_t ncclGetVersion(int*); ncclSuccess == 0
    if (auto get = reinterpret_cast<GetVersion>(::dlsym(handle, "ncclGetVersion"))) {
      int code = 0;
      if (get(&code) == 0 && code > 0) found.version = code;
    }
    link_map* map = nullptr;
    if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) found.path = map->l_name;
    ::dlclose(handle);
    if (found.version) return found;
  }
  return {};
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
