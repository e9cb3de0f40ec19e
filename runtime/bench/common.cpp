#include "common.hpp"

#ifdef RINGRUN_BENCH_HAVE_MPI
#include <mpi.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ringrun::bench {
namespace {
bool mpi_initialized = false;
}  // namespace

void set_mpi_initialized(bool initialized) { mpi_initialized = initialized; }

void fail(const std::string &message) {
  std::fprintf(stderr, "ringrun-bench: %s\n", message.c_str());
  std::fflush(stderr);
#ifdef RINGRUN_BENCH_HAVE_MPI
  if (mpi_initialized) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::exit(1);
}

void check_rc(int rc, std::string_view what) {
  if (rc != 0) fail(fmt::format("{} failed ({}): {}", what, rc, ringrun_last_error()));
}

Buffer::Buffer(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 64)) {
  const std::size_t rounded = (bytes_ + 4095) / 4096 * 4096;
  data_ = static_cast<std::byte *>(std::aligned_alloc(4096, rounded));
  if (data_ == nullptr) fail(fmt::format("cannot allocate {} bytes: lower --max-bytes", bytes_));
  std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { std::free(data_); }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

void max_over_ranks(std::vector<double> &values) {
  check_rc(ringrun_allreduce(values.data(), values.data(), values.size(), RINGRUN_FLOAT64, RINGRUN_MAX),
           "ringrun_allreduce (max of the timings)");
}

std::size_t sum_over_ranks(std::size_t value) {
  std::int64_t total = static_cast<std::int64_t>(value);
  check_rc(ringrun_allreduce(&total, &total, 1, RINGRUN_INT64, RINGRUN_SUM),
           "ringrun_allreduce (sum of the wrong counts)");
  return static_cast<std::size_t>(total);
}

int ops_per_sample(double seconds_per_op, double sample_ms) {
  std::vector<double> probe{seconds_per_op};
  max_over_ranks(probe);
  const double k = std::floor(sample_ms / 1e3 / std::max(probe[0], 1e-9));
  return static_cast<int>(std::clamp(k, 1.0, 100000.0));
}

int default_warmup(std::size_t bytes) {
  if (bytes < kMiB) return 50;
  if (bytes <= 16 * kMiB) return 5;
  return 2;
}

std::string or_dash(const std::optional<double> &value, int decimals) {
  return value && std::isfinite(*value) ? fmt::format("{:.{}f}", *value, decimals) : "-";
}

std::string json_number(const std::optional<double> &value) {
  return value && std::isfinite(*value) ? fmt::format("{}", *value) : "null";
}

}  // namespace ringrun::bench
