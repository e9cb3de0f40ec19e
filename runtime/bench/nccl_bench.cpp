// ringrun-nccl-bench: ringrun's collectives on device buffers (the NCCL transport), nccl-tests
// style: one row per size, `size count type op time_us algbw_GBps busbw_GBps wrong`. Each rank
// uses CUDA device (local rank mod device count). Built only with NCCL.
//   ringrun-nccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--collective allreduce|broadcast|allgather|all]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ringrun/ringrun.h"

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "ringrun-nccl-bench: %s\n", message.c_str());
  std::exit(1);
}

void cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) fail(std::string(call) + ": " + cudaGetErrorString(rc));
}

void ringrun(int rc, const char* call) {
  if (rc != 0) fail(std::string(call) + ": " + ringrun_last_error());
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
    ringrun(ringrun_allreduce(send, recv, count, RINGRUN_FLOAT32, RINGRUN_SUM), "ringrun_allreduce");
  } else if (collective == "broadcast") {
    ringrun(ringrun_broadcast(recv, count, RINGRUN_FLOAT32, 0), "ringrun_broadcast");
  } else {
    (void)size;
    ringrun(ringrun_allgather(send, count, RINGRUN_FLOAT32, recv), "ringrun_allgather");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 4, max_bytes = std::size_t{256} << 20;
  int iters = 20;
  std::string which = "all";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) fail("usage: ringrun-nccl-bench [--min-bytes N] [--max-bytes N] [--iters N] [--collective C|all]");
    if (arg == "--min-bytes") min_bytes = parse_size("--min-bytes", argv[++i]);
    else if (arg == "--max-bytes") max_bytes = parse_size("--max-bytes", argv[++i]);
    else if (arg == "--iters") iters = static_cast<int>(parse_size("--iters", argv[++i]));
    else if (arg == "--collective") which = argv[++i];
    else fail("unknown option '" + arg + "'");
  }
  if (which != "all" && which != "allreduce" && which != "broadcast" && which != "allgather")
    fail("--collective '" + which + "': expected allreduce, broadcast, allgather or all");
  int devices = 0;
  cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0)
    fail(std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(probe));
  ringrun(ringrun_init(), "ringrun_init");
  const int rank = ringrun_rank(), size = ringrun_size();
  cuda(cudaSetDevice(ringrun_local_rank() % devices), "cudaSetDevice");
  const std::size_t max_count = max_bytes / 4;
  float *send = nullptr, *recv = nullptr;
  cuda(cudaMalloc(reinterpret_cast<void**>(&send), max_count * 4), "cudaMalloc");
  cuda(cudaMalloc(reinterpret_cast<void**>(&recv), max_count * 4 * static_cast<std::size_t>(size)), "cudaMalloc");
  std::vector<float> host(max_count * static_cast<std::size_t>(size));
  if (rank == 0)
    std::printf("# ringrun-nccl-bench: %d rank(s), device buffers, float32 sum\n"
                "%-10s %-10s %-12s %-8s %-6s %10s %11s %11s %6s\n",
                size, "collective", "size", "count", "type", "op", "time_us", "algbw_GBps", "busbw_GBps", "wrong");
  for (std::string collective : {"allreduce", "broadcast", "allgather"}) {
    if (which != "all" && which != collective) continue;
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const std::size_t count = bytes / 4 ? bytes / 4 : 1;
      // Check one call: every rank contributes (rank + 1) everywhere.
      std::vector<float> mine(count, static_cast<float>(rank + 1));
      cuda(cudaMemcpy(send, mine.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      if (collective == "broadcast") cuda(cudaMemcpy(recv, mine.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      run_op(collective, send, recv, count, size);
      std::size_t out = collective == "allgather" ? count * static_cast<std::size_t>(size) : count;
      cuda(cudaMemcpy(host.data(), recv, out * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      std::int64_t wrong = 0;
      for (std::size_t i = 0; i < out; ++i) {
        float want = collective == "allreduce"   ? static_cast<float>(size * (size + 1) / 2)
                     : collective == "broadcast" ? 1.0f
                                                 : static_cast<float>(i / count + 1);
        wrong += host[i] != want;
      }
      const int warmup = bytes < (std::size_t{1} << 20) ? 20 : 3;
      for (int i = 0; i < warmup; ++i) run_op(collective, send, recv, count, size);
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run_op(collective, send, recv, count, size);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
      double algbw = static_cast<double>(count * 4) / (us * 1e3);
      double factor = collective == "allreduce" ? 2.0 * (size - 1) / size
                                                : collective == "allgather" ? static_cast<double>(size - 1) / size : 1.0;
      if (collective == "allgather") algbw *= size;
      std::int64_t wrong_all = wrong;
      ringrun(ringrun_allreduce(&wrong, &wrong_all, 1, RINGRUN_INT64, RINGRUN_SUM), "ringrun_allreduce");
      if (rank == 0)
        std::printf("%-10s %-10zu %-12zu %-8s %-6s %10.2f %11.3f %11.3f %6ld\n", collective.c_str(), count * 4, count,
                    "float", "sum", us, algbw, algbw * factor, wrong_all);
      std::fflush(stdout);
    }
  }
  cudaFree(send);
  cudaFree(recv);
  ringrun(ringrun_finalize(), "ringrun_finalize");
  return 0;
}
