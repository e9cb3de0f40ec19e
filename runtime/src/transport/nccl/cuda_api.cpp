#include "transport/nccl/cuda_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "ringrun/gpu_libraries.hpp"
#include "ringrun/runtime.hpp"

// The symbol a declaration names after the headers' macros (cudaGetDeviceProperties is
// cudaGetDeviceProperties_v2 in CUDA 12 and later, for one).
#define RINGRUN_SYMBOL_TEXT(name) RINGRUN_SYMBOL_TEXT_EXPANDED(name)
#define RINGRUN_SYMBOL_TEXT_EXPANDED(name) #name

namespace ringrun::core {
namespace {

template <typename Api>
struct Loaded {
  Api api{};
  std::string error;  // set when the library or one of its functions is missing
};

// Loads `library` (the search of ringrun/gpu_libraries.hpp, anchored at this library's folder)
// and resolves each function with `resolve(api, symbol)`; the handle stays open for the process.
template <typename Api, typename Resolve>
Loaded<Api> load(gpu::Library library, Resolve resolve) {
  Loaded<Api> loaded;
  gpu::SearchContext context;
  context.anchor = gpu::folder_of_object_at(reinterpret_cast<const void*>(&nccl_loaded_version));
  gpu::Lookup lookup = gpu::find(library, context);
  if (!lookup.found) {
    loaded.error = lookup.error;
    return loaded;
  }
  void* handle = lookup.found->handle;
  std::string missing;
  auto symbol = [&](const char* name) -> void* {
    void* address = ::dlsym(handle, name);
    if (!address && missing.empty()) missing = name;
    return address;
  };
  resolve(loaded.api, symbol);
  loaded.api.description = gpu::describe(library, *lookup.found);
  if (!missing.empty())
    loaded.error = fmt::format("{} has no {} (it is older than ringrun needs); {}", loaded.api.description, missing,
                               library == gpu::Library::nccl ? "install NCCL 2.14 or newer (pip install nvidia-nccl-cu13)"
                                                             : "install CUDA 12 or newer (pip install nvidia-cuda-runtime)");
  return loaded;
}

#define RINGRUN_RESOLVE(api, symbol, field, prefix) \
  api.field = reinterpret_cast<decltype(api.field)>(symbol(RINGRUN_SYMBOL_TEXT(prefix##field)))

}  // namespace

const NcclApi& nccl_api() {
  static const Loaded<NcclApi> loaded = load<NcclApi>(gpu::Library::nccl, [](NcclApi& api, auto&& symbol) {
    RINGRUN_RESOLVE(api, symbol, GetVersion, nccl);
    RINGRUN_RESOLVE(api, symbol, GetUniqueId, nccl);
    RINGRUN_RESOLVE(api, symbol, CommInitRankConfig, nccl);
    RINGRUN_RESOLVE(api, symbol, CommInitRank, nccl);
    RINGRUN_RESOLVE(api, symbol, CommInitAll, nccl);
    RINGRUN_RESOLVE(api, symbol, CommGetAsyncError, nccl);
    RINGRUN_RESOLVE(api, symbol, GetErrorString, nccl);
    RINGRUN_RESOLVE(api, symbol, GetLastError, nccl);
    RINGRUN_RESOLVE(api, symbol, AllReduce, nccl);
    RINGRUN_RESOLVE(api, symbol, Broadcast, nccl);
    RINGRUN_RESOLVE(api, symbol, AllGather, nccl);
    RINGRUN_RESOLVE(api, symbol, CommFinalize, nccl);
    RINGRUN_RESOLVE(api, symbol, CommDestroy, nccl);
    RINGRUN_RESOLVE(api, symbol, CommAbort, nccl);
  });
  if (!loaded.error.empty()) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, loaded.error);
  return loaded.api;
}

const CudaRuntimeApi& cuda_runtime_api() {
  static const Loaded<CudaRuntimeApi> loaded =
      load<CudaRuntimeApi>(gpu::Library::cuda_runtime, [](CudaRuntimeApi& api, auto&& symbol) {
        RINGRUN_RESOLVE(api, symbol, GetDevice, cuda);
        RINGRUN_RESOLVE(api, symbol, SetDevice, cuda);
        RINGRUN_RESOLVE(api, symbol, GetDeviceCount, cuda);
        RINGRUN_RESOLVE(api, symbol, GetLastError, cuda);
        RINGRUN_RESOLVE(api, symbol, GetErrorString, cuda);
        RINGRUN_RESOLVE(api, symbol, GetErrorName, cuda);
        RINGRUN_RESOLVE(api, symbol, StreamCreate, cuda);
        RINGRUN_RESOLVE(api, symbol, StreamCreateWithFlags, cuda);
        RINGRUN_RESOLVE(api, symbol, StreamQuery, cuda);
        RINGRUN_RESOLVE(api, symbol, StreamSynchronize, cuda);
        RINGRUN_RESOLVE(api, symbol, StreamDestroy, cuda);
        RINGRUN_RESOLVE(api, symbol, DeviceSynchronize, cuda);
        RINGRUN_RESOLVE(api, symbol, Memcpy, cuda);
        RINGRUN_RESOLVE(api, symbol, MemcpyAsync, cuda);
        RINGRUN_RESOLVE(api, symbol, Malloc, cuda);
        RINGRUN_RESOLVE(api, symbol, Free, cuda);
        RINGRUN_RESOLVE(api, symbol, MallocHost, cuda);
        RINGRUN_RESOLVE(api, symbol, FreeHost, cuda);
        RINGRUN_RESOLVE(api, symbol, MallocAsync, cuda);
        RINGRUN_RESOLVE(api, symbol, FreeAsync, cuda);
      });
  if (!loaded.error.empty()) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, loaded.error);
  return loaded.api;
}

int nccl_loaded_version() {
  int code = 0;
  const NcclApi& api = nccl_api();
  if (api.GetVersion(&code) != ncclSuccess)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: ncclGetVersion failed", api.description));
  return code;
}

}  // namespace ringrun::core
