// Helpers shared by the collective sweep (bench.cpp) and the engine benchmark (engine_bench.cpp):
// failing loudly on every rank, page-aligned buffers, and the sampling method of RESULTS.md,
// "Method" (k back-to-back runs after a barrier, median over samples of the slowest rank's time).
#pragma once

#include <ringrun/ringrun.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun::bench {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Set once MPI_Init has run, so that fail() aborts the whole MPI job instead of leaving a peer hanging.
void set_mpi_initialized(bool initialized);

[[noreturn]] void fail(const std::string &message);
// fail() with the C API's message when rc is an error.
void check_rc(int rc, std::string_view what);

// Page-aligned memory, touched once so page faults stay out of the timings.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes);
  ~Buffer();
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  std::byte *data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  std::byte *data_;
};

double seconds_since(Clock::time_point start);
double median(std::vector<double> values);

// Element-wise maximum over ranks, in place (a sample lasts as long as its slowest rank).
void max_over_ranks(std::vector<double> &values);
std::size_t sum_over_ranks(std::size_t value);

// Times `k` back-to-back runs of `run_once` after `barrier`, per run in seconds, on this rank.
template <typename Barrier, typename RunOnce>
double time_sample(Barrier &&barrier, RunOnce &&run_once, int k) {
  barrier();
  const auto start = Clock::now();
  for (int i = 0; i < k; ++i) run_once();
  return seconds_since(start) / k;
}

// Runs per sample so that one sample takes about `sample_ms`, the same on every rank.
int ops_per_sample(double seconds_per_op, double sample_ms);

// Warm-up ops before timing a message of `bytes`: 50 below 1 MiB, 5 up to 16 MiB, 2 above.
int default_warmup(std::size_t bytes);

// "1.23" with `decimals`, or "-" when absent or not finite.
std::string or_dash(const std::optional<double> &value, int decimals);
// A JSON number, or null when absent or not finite.
std::string json_number(const std::optional<double> &value);

}  // namespace ringrun::bench
