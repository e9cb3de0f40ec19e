// The NCCL and CUDA runtime functions ringrun calls on device buffers, resolved in the libraries
// that ringrun::gpu::find loads when a job first needs them (ringrun/gpu_libraries.hpp): ringrun
// links neither, so the same library runs on CPU-only hosts and with CUDA 12 or 13. The types are
// the headers' own (decltype of each declaration), so a signature change fails the build.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace ringrun::core {

struct NcclApi {
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclCommInitRank) CommInitRank;
  decltype(&::ncclCommInitAll) CommInitAll;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclBroadcast) Broadcast;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclCommFinalize) CommFinalize;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  std::string description;  // "NCCL 2.32.3 (/path/libnccl.so.2, from ...)"
};

struct CudaRuntimeApi {
  decltype(&::cudaGetDevice) GetDevice;
  decltype(&::cudaSetDevice) SetDevice;
  decltype(&::cudaGetDeviceCount) GetDeviceCount;
  decltype(&::cudaGetLastError) GetLastError;
  decltype(&::cudaGetErrorString) GetErrorString;
  decltype(&::cudaGetErrorName) GetErrorName;
  decltype(&::cudaStreamCreate) StreamCreate;
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags;
  decltype(&::cudaStreamQuery) StreamQuery;
  decltype(&::cudaStreamSynchronize) StreamSynchronize;
  decltype(&::cudaStreamDestroy) StreamDestroy;
  decltype(&::cudaDeviceSynchronize) DeviceSynchronize;
  decltype(&::cudaMemcpy) Memcpy;
  decltype(&::cudaMemcpyAsync) MemcpyAsync;
  // cuda_runtime.h adds template overloads of these three: the C declaration is the one named.
  decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc)) Malloc;
  decltype(&::cudaFree) Free;
  decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMallocHost)) MallocHost;
  decltype(&::cudaFreeHost) FreeHost;
  decltype(static_cast<cudaError_t (*)(void**, size_t, cudaStream_t)>(&::cudaMallocAsync)) MallocAsync;
  decltype(&::cudaFreeAsync) FreeAsync;
  std::string description;  // "CUDA runtime 13.0 (/path/libcudart.so.13, from ...)"
};

// Loaded on the first call, once per process (thread-safe). Each throws RuntimeError
// (RINGRUN_ERR_INVALID_ARGUMENT) with one line naming what is missing and how to get it, on this
// call and every later one.
const NcclApi& nccl_api();
const CudaRuntimeApi& cuda_runtime_api();

// The loaded NCCL's version code (2.32.3 -> 23203), loading it if needed; throws as nccl_api().
int nccl_loaded_version();

}  // namespace ringrun::core
