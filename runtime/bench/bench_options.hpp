// ringrun-bench's command line: the options and their checks.
#pragma once

#include "common.hpp"
#include "engine_bench.hpp"
#include "peer.hpp"

#include <ringrun/ringrun.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ringrun::bench {

struct Options {
  std::vector<Collective> collectives;
  std::size_t min_bytes = 4;
  std::size_t max_bytes = 256 * kMiB;
  std::size_t step_factor = 4;
  int iters = 11;          // timed samples per size and library
  int warmup = -1;         // ops before timing; -1: 50 below 1 MiB, 5 up to 16 MiB, 2 above
  double sample_ms = 25;   // each sample runs k back-to-back ops, k chosen to take about this long
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  ringrun_op op = RINGRUN_SUM;
  std::string peer = "auto";
  bool check = false;
  bool json = false;
  bool engine = false;  // --collective engine: the engine benchmark instead of the sweep
  EngineBenchOptions engine_options;
};

// Rank as the launcher set it, before any library is initialised: only rank 0 prints usage errors.
int launcher_rank();
bool started_by_mpirun();

// Returns the exit code when the process should stop (help or a usage error), else nullopt.
std::optional<int> parse_options(int argc, char **argv, Options &options);

}  // namespace ringrun::bench
