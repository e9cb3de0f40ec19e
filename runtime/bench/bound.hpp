// The memory bound of an allreduce (RESULTS.md, "The memory bound (bound_frac)"): the bytes each
// rank must move to and from memory for the shared-memory algorithm at a size, at the per-rank
// rate a streaming kernel reaches when every rank runs it at once (they share the memory system).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ringrun::bench {

// Per-rank rates in GB/s of bytes read plus bytes written, every rank streaming at once.
struct StreamRates {
  double copy_GBps = 0;  // dst = src: one byte read per byte written, the allreduce's memory mix
  double sum_GBps = 0;   // a = b + c (float32): two read per one written; printed for comparison
};

// Bytes per rank of each streaming kernel's source and destination: far beyond a core's share of
// the L3 (this VM's sysconf reports the whole host's L3, 508 MiB, so it does not size them).
constexpr std::size_t kStreamBufferBytes = std::size_t{256} << 20;
// bound_frac is shown from this size on: below it the ranks' send and receive buffers stay in
// cache across the back-to-back samples, so the streaming rates are not what limits them.
constexpr std::size_t kBoundMinBytes = std::size_t{16} << 20;

// Every rank at once, aligned by barriers: both kernels over kStreamBufferBytes (non-temporal
// stores, as the allreduce's large outputs), 2 warm-ups, then the median of 7 of the slowest
// rank's time. Collective: every rank calls it.
StreamRates measure_stream_rates();

// Bytes one rank must move between its core and memory in one allreduce of `bytes` over
// `transport` (ringrun_transport_name()), per message byte: its input read once and its output
// written once, 2, on the streamed shm path (the exchange through the shared segment stays in
// cache) and for one rank; nullopt where there is no model (the latency path, TCP).
std::optional<double> allreduce_memory_bytes_factor(std::size_t bytes, std::string_view transport);

// Bytes one rank reads plus writes on the streamed shm path, per message byte, the shared segment
// included: (5n-2)/n, 4 at 2 ranks. For the header: what the bound leaves to the caches.
double shm_touched_bytes_factor(int ranks);

// bound_time in seconds: the memory bytes at the copy rate (one byte read per byte written, as the
// allreduce's memory traffic); nullopt where there is no model or no rate.
std::optional<double> allreduce_bound_seconds(std::size_t bytes, std::string_view transport, const StreamRates &rates);

// The `# bound:` header line of the allreduce table (with its newline).
std::string bound_header(const StreamRates &rates, int ranks, std::string_view transport);

}  // namespace ringrun::bench
