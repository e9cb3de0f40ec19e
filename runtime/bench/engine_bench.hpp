// `ringrun-bench --collective engine`: tensor fusion and latency of the engine (the named async
// calls of ringrun.h) against one allreduce of the same total size, the same tensors one by one
// through ringrun_allreduce and through the peer, and a plain ringrun_allreduce of one tensor.
#pragma once

#include "peer.hpp"

#include <ringrun/ringrun.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ringrun::bench {

struct EngineBenchOptions {
  std::size_t fusion_tensors = 1024;      // the "NxB" workload: N tensors ...
  std::size_t fusion_tensor_bytes = 4096;  // ... of B bytes each
  bool run_fusion = true;
  bool run_resnet50 = true;
  bool run_latency = true;
  std::vector<std::size_t> latency_sizes{4, 4096, 65536, std::size_t{1} << 20};
  bool shuffle = false;  // each rank submits a step's tensors in its own random order, new every step
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  ringrun_op op = RINGRUN_SUM;
  int iters = 11;
  int warmup = -1;  // -1: 3 steps (workloads; the engine's first, fully described step comes on top), 50/5/2 ops (latency)
  double sample_ms = 25;
  bool check = false;
  bool json = false;
};

struct EngineBenchContext {
  int rank = 0;
  int ranks = 1;
  Peer *peer = nullptr;  // null: no peer columns
  std::string peer_name;
  double memcpy_GBps = 0;
};

// Call before anything has started the engine: the baselines are measured first on ringrun's
// direct path, because once the first async call starts the engine, every synchronous
// ringrun_* call goes through it until ringrun_finalize(). Prints the tables on rank 0 (or, with
// --json, appends row objects to json_rows).
void run_engine_bench(const EngineBenchOptions &options, const EngineBenchContext &context,
                      std::vector<std::string> &json_rows);

}  // namespace ringrun::bench
