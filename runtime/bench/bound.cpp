#include "bound.hpp"

#include "common.hpp"

#include <ringrun/ringrun.h>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <vector>

namespace ringrun::bench {

namespace {

constexpr int kStreamWarmups = 2;
constexpr int kStreamReps = 7;

// Non-temporal stores, as the allreduce writes outputs of 8 MiB and more: a plain store would read
// each destination line first, traffic the byte counts here would not show. n: a multiple of 16.
void stream_copy(float *dst, const float *src, std::size_t n) {
#if defined(__SSE2__)
  for (std::size_t i = 0; i < n; i += 16) {
    for (std::size_t j = 0; j < 16; j += 4) _mm_stream_ps(dst + i + j, _mm_load_ps(src + i + j));
  }
  _mm_sfence();
#else
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
#endif
}

void stream_sum(float *dst, const float *a, const float *b, std::size_t n) {
#if defined(__SSE2__)
  for (std::size_t i = 0; i < n; i += 16) {
    for (std::size_t j = 0; j < 16; j += 4)
      _mm_stream_ps(dst + i + j, _mm_add_ps(_mm_load_ps(a + i + j), _mm_load_ps(b + i + j)));
  }
  _mm_sfence();
#else
  for (std::size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
#endif
}

// Per-rank GB/s of `bytes_moved` per run of `kernel`, every rank running it at once: each rep
// starts at a barrier and lasts as long as its slowest rank.
template <typename Kernel>
double rate_at_once(std::size_t bytes_moved, Kernel &&kernel) {
  auto barrier = [] { check_rc(ringrun_barrier(), "ringrun_barrier (streaming kernel)"); };
  for (int i = 0; i < kStreamWarmups; ++i) time_sample(barrier, kernel, 1);
  std::vector<double> seconds;
  for (int i = 0; i < kStreamReps; ++i) seconds.push_back(time_sample(barrier, kernel, 1));
  max_over_ranks(seconds);
  return static_cast<double>(bytes_moved) / median(seconds) / 1e9;
}

}  // namespace

StreamRates measure_stream_rates() {
  Buffer source(kStreamBufferBytes), destination(kStreamBufferBytes);
  const std::size_t n = kStreamBufferBytes / sizeof(float);
  auto *src = reinterpret_cast<float *>(source.data());
  auto *dst = reinterpret_cast<float *>(destination.data());
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i & 1023);
  StreamRates rates;
  rates.copy_GBps = rate_at_once(2 * kStreamBufferBytes, [&] { stream_copy(dst, src, n); });
  // a = b + c: b and c the two halves of the source, a the first half of the destination.
  rates.sum_GBps = rate_at_once(kStreamBufferBytes + kStreamBufferBytes / 2,
                                [&] { stream_sum(dst, src, src + n / 2, n / 2); });
  return rates;
}

// The streamed shm path of runtime/src/transport/shm/shm_transport.cpp, per rank, for a message
// of S bytes over n ranks: export the others' shards to its ring chunk (read and write (n-1)S/n),
// reduce its own shard from its input and the n-1 peers' ring chunks (read S) into its ring chunk
// and its output (write 2S/n), copy the others' results out of their ring chunks (read and write
// (n-1)S/n). The ring is 4 chunks of at most 256 KiB per rank (1 MiB), so it stays in cache: what
// must come from memory is the input, read once, and the output, written once with non-temporal
// stores from 8 MiB on (ShmTransport::kStreamMinBytes), so no read for ownership: 2S.
std::optional<double> allreduce_memory_bytes_factor(std::size_t bytes, std::string_view transport) {
  constexpr std::size_t kShmDirectMaxBytes = 16 * 1024;  // ShmTransport::kDirectMaxBytes: all in cache
  if (transport == "self") return 2.0;                    // the input copied to the output
  if (transport == "shm" && bytes > kShmDirectMaxBytes) return 2.0;
  return std::nullopt;
}

double shm_touched_bytes_factor(int ranks) {
  const double n = ranks;
  return 2 * (n - 1) / n + (1 + 2 / n) + 2 * (n - 1) / n;  // export, reduce, collect
}

std::optional<double> allreduce_bound_seconds(std::size_t bytes, std::string_view transport, const StreamRates &rates) {
  const auto factor = allreduce_memory_bytes_factor(bytes, transport);
  if (!factor || rates.copy_GBps <= 0) return std::nullopt;
  return *factor * static_cast<double>(bytes) / (rates.copy_GBps * 1e9);
}

std::string bound_header(const StreamRates &rates, int ranks, std::string_view transport) {
  std::string line = fmt::format(
      "# bound: every rank's core at once streams {} MiB (non-temporal stores, median of {} of the slowest rank): "
      "copy {:.2f}, a=b+c {:.2f} GB/s per rank (bytes read + written); ",
      kStreamBufferBytes >> 20, kStreamReps, rates.copy_GBps, rates.sum_GBps);
  const auto factor = allreduce_memory_bytes_factor(kBoundMinBytes, transport);
  if (!factor) return line + fmt::format("no memory model for transport {}: bound_frac not shown\n", transport);
  std::string cache_note;
  if (transport == "shm")
    cache_note = fmt::format(" (the rest of the {:.2f} x size each rank reads and writes passes through the shared "
                             "segment's ring, in cache)", shm_touched_bytes_factor(ranks));
  return line + fmt::format("bound_time = {:.2f} x size at the copy rate: the input read once and the output written "
                            "once{}; bound_frac = bound_time / time_us, shown from {} MiB (below, the buffers stay "
                            "in cache)\n",
                            *factor, cache_note, kBoundMinBytes >> 20);
}

}  // namespace ringrun::bench
