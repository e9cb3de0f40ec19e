// ringrun-nccl-bench: ringrun's collectives on device buffers (the NCCL transport, through the
// engine), nccl-tests style, beside NCCL called directly in the same run (its own communicator
// over the same ranks and devices, one stream, synchronised per call as ringrun's calls are):
// one row per size, `collective size count type op time_us algbw_GBps busbw_GBps wrong
// peer_time_us peer_busbw_GBps ratio` (ratio = peer time / ringrun time: above 1, ringrun is
// faster). Each rank uses CUDA device (local rank mod device count). Built only with NCCL.
//   ringrun-nccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--collective allreduce|broadcast|allgather|all]
//                      [--peer nccl|none]
// NCCL and the CUDA runtime through the functions the runtime loads (transport/nccl/cuda_api.hpp).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ringrun/ringrun.h"
#include "transport/nccl/cuda_api.hpp"

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "ringrun-nccl-bench: %s\n", message.c_str());
  std::exit(1);
}

const ringrun::core::CudaRuntimeApi& rt() {
  try {
    return ringrun::core::cuda_runtime_api();
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

const ringrun::core::NcclApi& nccl_lib() {
  try {
    return ringrun::core::nccl_api();
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) fail(std::string(call) + ": " + rt().GetErrorString(rc));
}

void check_ringrun(int rc, const char* call) {
  if (rc != 0) fail(std::string(call) + ": " + ringrun_last_error());
}

void nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) fail(std::string(call) + ": " + nccl_lib().GetErrorString(rc));
}

// The peer: NCCL itself, on a communicator of its own (the id crosses over ringrun's host path).
struct NcclPeer {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  NcclPeer(int rank, int size) {
    ncclUniqueId id{};
    if (rank == 0) nccl(nccl_lib().GetUniqueId(&id), "ncclGetUniqueId");
    check_ringrun(ringrun_broadcast(&id, sizeof id, RINGRUN_UINT8, 0), "ringrun_broadcast of the NCCL id");
    cuda(rt().StreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    nccl(nccl_lib().CommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  }
  ~NcclPeer() {
    nccl_lib().CommDestroy(comm);
    rt().StreamDestroy(stream);
  }
  void run(const std::string& collective, float* send, float* recv, std::size_t count) {
    if (collective == "allreduce")
      nccl(nccl_lib().AllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
    else if (collective == "broadcast")
      nccl(nccl_lib().Broadcast(recv, recv, count, ncclFloat32, 0, comm, stream), "ncclBroadcast");
    else
      nccl(nccl_lib().AllGather(send, recv, count, ncclFloat32, comm, stream), "ncclAllGather");
    cuda(rt().StreamSynchronize(stream), "cudaStreamSynchronize");
  }
};

// Mean microseconds per call of `op` over `iters` calls, after a warm-up.
template <typename Op>
double time_us(std::size_t bytes, int iters, Op op) {
  const int warmup = bytes < (std::size_t{1} << 20) ? 20 : 3;
  for (int i = 0; i < warmup; ++i) op();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) op();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
}

// The slowest rank's time: every rank prints the same row.
double slowest(double us) {
  double out = us;
  check_ringrun(ringrun_allreduce(&us, &out, 1, RINGRUN_FLOAT64, RINGRUN_MAX), "ringrun_allreduce");
  return out;
}

std::size_t parse_size(const char* option, const char* text) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0) fail(std::string(option) + " '" + text + "': expected a positive integer");
  return static_cast<std::size_t>(value);
}

// Runs one collective of `bytes` per rank on the device buffers.
void run_op(const std::string& collective, float* send, float* recv, std::size_t count, int size) {
  if (collective == "allreduce") {
    check_ringrun(ringrun_allreduce(send, recv, count, RINGRUN_FLOAT32, RINGRUN_SUM), "ringrun_allreduce");
  } else if (collective == "broadcast") {
    check_ringrun(ringrun_broadcast(recv, count, RINGRUN_FLOAT32, 0), "ringrun_broadcast");
  } else {
    (void)size;
    check_ringrun(ringrun_allgather(send, count, RINGRUN_FLOAT32, recv), "ringrun_allgather");
  }
}

// One checked call: every rank contributes (rank + 1) everywhere. Returns the wrong elements
// summed over the ranks.
std::int64_t check_once(const std::string& collective, float* send, float* recv, std::size_t count, int rank,
                        int size, std::vector<float>& host) {
  std::vector<float> mine(count, static_cast<float>(rank + 1));
  cuda(rt().Memcpy(send, mine.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (collective == "broadcast") cuda(rt().Memcpy(recv, mine.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  run_op(collective, send, recv, count, size);
  const std::size_t out = collective == "allgather" ? count * static_cast<std::size_t>(size) : count;
  cuda(rt().Memcpy(host.data(), recv, out * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < out; ++i) {
    const float want = collective == "allreduce"   ? static_cast<float>(size * (size + 1) / 2)
                       : collective == "broadcast" ? 1.0f
                                                   : static_cast<float>(i / count + 1);
    wrong += host[i] != want;
  }
  std::int64_t wrong_all = wrong;
  check_ringrun(ringrun_allreduce(&wrong, &wrong_all, 1, RINGRUN_INT64, RINGRUN_SUM), "ringrun_allreduce");
  return wrong_all;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 4, max_bytes = std::size_t{256} << 20;
  int iters = 20;
  std::string which = "all", peer_name = "nccl";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      fail("usage: ringrun-nccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--collective C|all] [--peer nccl|none]");
    if (arg == "--min-bytes") min_bytes = parse_size("--min-bytes", argv[++i]);
    else if (arg == "--max-bytes") max_bytes = parse_size("--max-bytes", argv[++i]);
    else if (arg == "--iters") iters = static_cast<int>(parse_size("--iters", argv[++i]));
    else if (arg == "--collective") which = argv[++i];
    else if (arg == "--peer") peer_name = argv[++i];
    else fail("unknown option '" + arg + "'");
  }
  if (which != "all" && which != "allreduce" && which != "broadcast" && which != "allgather")
    fail("--collective '" + which + "': expected allreduce, broadcast, allgather or all");
  if (peer_name != "nccl" && peer_name != "none") fail("--peer '" + peer_name + "': expected nccl or none");
  int devices = 0;
  cudaError_t probe = rt().GetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0)
    fail(std::string("no CUDA device: cudaGetDeviceCount returned ") + rt().GetErrorName(probe));
  check_ringrun(ringrun_init(), "ringrun_init");
  const int rank = ringrun_rank(), size = ringrun_size();
  cuda(rt().SetDevice(ringrun_local_rank() % devices), "cudaSetDevice");
  const std::size_t max_count = max_bytes / 4;
  float *send = nullptr, *recv = nullptr;
  cuda(rt().Malloc(reinterpret_cast<void**>(&send), max_count * 4), "cudaMalloc");
  cuda(rt().Malloc(reinterpret_cast<void**>(&recv), max_count * 4 * static_cast<std::size_t>(size)), "cudaMalloc");
  std::vector<float> host(max_count * static_cast<std::size_t>(size));
  std::optional<NcclPeer> peer;
  if (peer_name == "nccl") peer.emplace(rank, size);
  if (rank == 0) {
    int nccl_version = 0;
    nccl_lib().GetVersion(&nccl_version);
    std::printf("# ringrun-nccl-bench: %d rank(s), device buffers, float32 sum, %d iterations per size\n"
                "# peer: %s (NCCL %d, called directly on its own communicator)\n"
                "%-10s %12s %11s %5s %4s %10s %10s %10s %6s %12s %15s %6s\n",
                size, iters, peer ? "ncclAllReduce/ncclBroadcast/ncclAllGather" : "none", nccl_version,
                "collective", "size", "count", "type", "op", "time_us", "algbw_GBps", "busbw_GBps", "wrong",
                "peer_time_us", "peer_busbw_GBps", "ratio");
  }
  for (std::string collective : {"allreduce", "broadcast", "allgather"}) {
    if (which != "all" && which != collective) continue;
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const std::size_t count = bytes / 4 ? bytes / 4 : 1;
      const std::int64_t wrong = check_once(collective, send, recv, count, rank, size, host);
      const double us = slowest(time_us(bytes, iters, [&] { run_op(collective, send, recv, count, size); }));
      const double peer_us =
          peer ? slowest(time_us(bytes, iters, [&] { peer->run(collective, send, recv, count); })) : 0.0;
      const double factor = collective == "allreduce"   ? 2.0 * (size - 1) / size
                            : collective == "allgather" ? static_cast<double>(size - 1) / size
                                                        : 1.0;
      const double moved = static_cast<double>(count * 4) * (collective == "allgather" ? size : 1);
      const double algbw = moved / (us * 1e3);
      if (rank == 0) {
        std::printf("%-10s %12zu %11zu %5s %4s %10.2f %10.3f %10.3f %6ld", collective.c_str(), count * 4, count,
                    "float", "sum", us, algbw, algbw * factor, wrong);
        if (peer)
          std::printf(" %12.2f %15.3f %6.2f", peer_us, moved / (peer_us * 1e3) * factor, peer_us / us);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  peer.reset();
  rt().Free(send);
  rt().Free(recv);
  check_ringrun(ringrun_finalize(), "ringrun_finalize");
  return 0;
}
