// Shared by the engine tests (test_engine.cpp, test_engine_cache.cpp): ranks as threads, each with
// its own Communicator and Engine; tensors whose values are exact in every dtype; the timeline check.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "engine/engine.hpp"
#include "rank_threads.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"

using namespace ringrun;
using core::Collective;
using core::Communicator;
using engine::Engine;
using engine::EngineConfig;
using engine::OpRequest;
using engine::OpState;
using test::Placement;

namespace engine_test {

// Tensor k's element i on rank r: a small integer, exact in every dtype used (fp16 included).
inline double value(int rank, std::size_t k, std::size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3 + k * 5) % 9) - 4);
}

inline void store(std::vector<char>& buf, std::size_t i, ringrun_dtype dtype, double v) {
  switch (dtype) {
    case RINGRUN_FLOAT32: reinterpret_cast<float*>(buf.data())[i] = static_cast<float>(v); break;
    case RINGRUN_FLOAT64: reinterpret_cast<double*>(buf.data())[i] = v; break;
    case RINGRUN_INT32: reinterpret_cast<std::int32_t*>(buf.data())[i] = static_cast<std::int32_t>(v); break;
    default: FAIL("dtype not used here");
  }
}

// One op of the mixed workload, the same description on every rank.
struct Spec {
  std::string name;
  Collective kind;
  ringrun_dtype dtype;
  ringrun_op op;
  std::size_t count;
  int root;
};

inline std::vector<Spec> make_specs(std::size_t n, int ranks) {
  static const ringrun_dtype dtypes[] = {RINGRUN_FLOAT32, RINGRUN_FLOAT64, RINGRUN_INT32};
  static const ringrun_op ops[] = {RINGRUN_SUM, RINGRUN_MAX, RINGRUN_MIN};
  std::vector<Spec> specs;
  for (std::size_t k = 0; k < n; ++k) {
    Collective kind = k % 23 == 5 ? Collective::broadcast : k % 29 == 7 ? Collective::allgather : Collective::allreduce;
    specs.push_back({"t." + std::to_string(k), kind, dtypes[k % 3], ops[(k / 3) % 3], 1 + (k * 13) % 97,
                     static_cast<int>(k % static_cast<std::size_t>(ranks))});
  }
  return specs;
}

// What rank `rank` submits for spec k (input) and what it must end up with (expected).
struct Buffers {
  std::vector<char> input, output, expected;
};

inline Buffers make_buffers(const Spec& s, std::size_t k, int rank, int ranks) {
  const std::size_t elem = core::dtype_size(s.dtype);
  Buffers b;
  b.input.assign(s.count * elem, 0);
  for (std::size_t i = 0; i < s.count; ++i) store(b.input, i, s.dtype, value(rank, k, i));
  if (s.kind == Collective::allreduce) {
    b.output.assign(s.count * elem, 0x5a);
    b.expected.assign(s.count * elem, 0);
    for (std::size_t i = 0; i < s.count; ++i) {
      double acc = value(0, k, i);
      for (int r = 1; r < ranks; ++r) {
        double v = value(r, k, i);
        acc = s.op == RINGRUN_SUM ? acc + v : s.op == RINGRUN_MAX ? std::max(acc, v) : std::min(acc, v);
      }
      store(b.expected, i, s.dtype, acc);
    }
  } else if (s.kind == Collective::broadcast) {
    b.expected.assign(s.count * elem, 0);
    for (std::size_t i = 0; i < s.count; ++i) store(b.expected, i, s.dtype, value(s.root, k, i));
  } else {
    b.output.assign(s.count * elem * static_cast<std::size_t>(ranks), 0x5a);
    b.expected.assign(s.count * elem * static_cast<std::size_t>(ranks), 0);
    for (int r = 0; r < ranks; ++r)
      for (std::size_t i = 0; i < s.count; ++i) {
        std::vector<char> one(elem);
        store(one, 0, s.dtype, value(r, k, i));
        std::memcpy(b.expected.data() + (static_cast<std::size_t>(r) * s.count + i) * elem, one.data(), elem);
      }
  }
  return b;
}

inline OpRequest request_for(const Spec& s, Buffers& b) {
  OpRequest r;
  r.kind = s.kind;
  r.name = s.name;
  r.count = s.count;
  r.dtype = s.dtype;
  r.op = s.op;
  r.root = s.root;
  if (s.kind == Collective::broadcast) {
    r.send = r.recv = b.input.data();
  } else {
    r.send = b.input.data();
    r.recv = b.output.data();
  }
  return r;
}

inline const std::vector<char>& result_of(const Spec& s, const Buffers& b) {
  return s.kind == Collective::broadcast ? b.input : b.output;
}

inline EngineConfig quick_config() {
  EngineConfig config;
  config.idle_heartbeat = std::chrono::milliseconds(20);
  return config;
}

inline int count_dir_entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// True when python3 parses the file as JSON and finds every name in some event's args.tensor.
inline bool timeline_valid(const std::string& path, const std::vector<std::string>& names, std::string& why) {
  std::string list_path = path + ".names";
  {
    std::ofstream out(list_path);
    for (auto& n : names) out << n << "\n";
  }
  std::string command = "/usr/bin/python3 -c '"
                        "import json,sys\n"
                        "ev=json.load(open(sys.argv[1]))\n"
                        "seen={e.get(\"args\",{}).get(\"tensor\") for e in ev}\n"
                        "want=[l.strip() for l in open(sys.argv[2]) if l.strip()]\n"
                        "missing=[w for w in want if w not in seen]\n"
                        "sys.exit(\"missing: %s\" % missing[:5] if missing else 0)' " +
                        path + " " + list_path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return false;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) why += buf;
  int status = pclose(pipe);
  std::remove(list_path.c_str());
  return status == 0;
}

}  // namespace engine_test
