// The NCCL and CUDA runtime libraries a job loads when it needs them, and the CUDA devices the
// host's driver offers. ringrun links neither library: one build (one wheel) serves CPU-only hosts
// and GPU hosts with CUDA 12 or 13, and uses the NCCL the user's torch brought (README, "On a GPU
// cluster"). One search order, for the launcher's plan and check-build and for the runtime's NCCL
// transport alike:
//   1. the variable that names the file (RINGRUN_NCCL_LIBRARY, RINGRUN_CUDART_LIBRARY): it must load;
//   2. a copy this process has already loaded (torch's CUDA build loads its NCCL at import);
//   3. the Python environment's nvidia/nccl/lib (nvidia/cu13/lib, nvidia/cuda_runtime/lib for the
//      CUDA runtime): PyPI's nvidia-nccl-cu13/-cu12 and nvidia-cuda-runtime, which torch brings;
//   4. NCCL_HOME (CUDA_HOME for the CUDA runtime), then LD_LIBRARY_PATH, then /usr/local/cuda;
//   5. the system's library path (ld.so.cache).
// Nothing here includes a CUDA or NCCL header: the runtime's typed tables over the handles are in
// runtime/src/transport/nccl/cuda_api.hpp.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun::gpu {

enum class Library { nccl, cuda_runtime };

// Reads one environment variable (nullopt when unset or empty). Tests pass their own.
using VariableReader = std::function<std::optional<std::string>(std::string_view name)>;
VariableReader process_environment();
// Reads a job's environment as the launcher holds it; `env` must outlive the reader.
VariableReader variables_of(const std::map<std::string, std::string>& env);

struct SearchContext {
  // The folder of the ringrun file that asks (the launcher's bin/, the runtime library's lib/):
  // the Python environment it is installed in is searched (its site-packages is an ancestor, or
  // it is a prefix's bin/ or lib/). VIRTUAL_ENV and CONDA_PREFIX are searched too.
  std::string anchor;
  VariableReader variable = process_environment();
};

// A library that loaded.
struct Found {
  void* handle = nullptr;  // the dlopen handle; held for the process's life unless released
  std::string path;        // the file the loader opened
  std::string origin;      // where in the search order it was found, e.g. "the Python environment"
  int version = 0;         // ncclGetVersion (2.32.3 -> 23203) or cudaRuntimeGetVersion (13000)
};

struct Lookup {
  std::optional<Found> found;
  std::string error;  // when nothing loaded: one line naming what was searched and how to get it
};

// Searches in the order above and loads the first file whose version function answers. `lazy`
// binds symbols on first call (the launcher asks only the version; see release()).
Lookup find(Library library, const SearchContext& context, bool lazy = false);

// dlclose of a handle find() returned, for a caller that only wanted the version.
void release(Found& found);

// The files find() would try in steps 1, 3 and 4, in order (the launcher's fact cache keys on
// them); the already-loaded copy and the system path are not files to name in advance.
std::vector<std::string> candidate_files(Library library, const SearchContext& context);

// The Python environments' site-packages folders searched in step 3, in order.
std::vector<std::string> python_site_folders(const SearchContext& context);

std::string library_name(Library library);                // "NCCL", "the CUDA runtime"
std::string version_text(Library library, int code);      // "2.32.3", "13.0"
std::string describe(Library library, const Found& found);  // "NCCL 2.32.3 (/x/libnccl.so.2, from ...)"

// The folder of the loaded object (executable or library) that holds `address` (dladdr).
std::string folder_of_object_at(const void* address);

// The CUDA devices the host's driver offers, asked of libcuda.so.1 without creating a context.
struct Devices {
  int count = 0;
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000; 0 when there is no driver
  std::string reason;      // why count is 0: "no CUDA device (no NVIDIA driver: libcuda.so.1 not found)", ...
};
Devices cuda_devices();

}  // namespace ringrun::gpu
