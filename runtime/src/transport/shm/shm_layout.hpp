// The shared-memory segment's per-rank control block (shm_transport.cpp and shm_collectives.cpp):
// what each rank posts for a round and the counters only it writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>


namespace ringrun::core {
namespace shm {

constexpr std::size_t kLine = 64;

// The header a rank describes its collective with (plain fields, published by its Post's round).
// Small fields in bytes, so that a post line has room for 32 bytes of data.
struct SharedHeader {
  std::uint8_t kind, dtype, op, unused;
  std::int32_t root;
  std::uint64_t seq, count;
};
static_assert(sizeof(SharedHeader) == 24);

// What a rank says about a round of one parity: its header, the arrival flag (written after it)
// and the first bytes of a small allreduce's input, so that the peer's one miss on the flag also
// brings the header and up to 32 bytes of data.
struct Post {
  std::atomic<std::uint32_t> round;  // the last round of this parity this rank arrived at
  std::uint32_t unused;
  SharedHeader header;
  std::byte data[kLine - sizeof(std::uint64_t) - sizeof(SharedHeader)];
};
static_assert(sizeof(Post) == kLine);
constexpr std::size_t kPostBytes = sizeof(Post::data);

// The rest of a small allreduce's input, 60 bytes a line, each line with its own round: a reader
// polls every line at once, so their misses overlap instead of queueing behind the post's (with
// one flag for all, 64 bytes took a second miss: 0.25 us more than 16 bytes).
struct InlineLine {
  std::atomic<std::uint32_t> round;
  std::byte data[kLine - sizeof(std::uint32_t)];
};
static_assert(sizeof(InlineLine) == kLine);
constexpr std::size_t kLineBytes = sizeof(InlineLine::data);
constexpr std::size_t kInlineLines = 35;
constexpr std::size_t kInlineBytes = kPostBytes + kInlineLines * kLineBytes;  // 2132
// Where a CPU cannot push a written line out to the shared cache (no CLDEMOTE: AMD, older Intel),
// a reader pulls each inline line from the writer's own cache, and past 9 lines the slot's one
// flag and contiguous lines are faster (AMD EPYC, 2 ranks: 1 KiB 1.29-1.37 us through the slot,
// 1.48-1.51 inline; 512 bytes 0.51 inline, 0.83-0.89 through the slot; runtime/bench/RESULTS.md,
// "Collectives: 2026-12-06 14:36 to 14:52 UTC: small allreduces on AMD EPYC").
constexpr std::size_t kInlineBytesWithoutDemote = kPostBytes + 9 * kLineBytes;  // 572
// Each rank's copy of an inline input starts on a cache line in the reader's private buffer: 2132
// is no multiple of 8, and an int64 or double the reduction loads must sit on its own alignment.
constexpr std::size_t kInlineStride = (kInlineBytes + kLine - 1) / kLine * kLine;  // 2176

// A rank's post and inline lines of one round parity, side by side.
struct Inbox {
  Post post;
  InlineLine lines[kInlineLines];
};
static_assert(sizeof(Inbox) % (2 * kLine) == 0);

inline bool reached(std::uint32_t value, std::uint32_t target) { return static_cast<std::int32_t>(value - target) >= 0; }

struct Control {
  alignas(2 * shm::kLine) shm::Inbox inbox[2];  // by round parity: a peer may still read the previous round's
  alignas(shm::kLine) std::atomic<std::uint32_t> consumed;
  alignas(shm::kLine) std::atomic<std::uint32_t> chunk_arrived;   // exported (or, for a root, wrote) this chunk
  alignas(shm::kLine) std::atomic<std::uint32_t> chunk_reduced;   // its shard of this chunk is in its ring
  alignas(shm::kLine) std::atomic<std::uint32_t> chunk_consumed;  // done reading every peer's ring for it
  alignas(shm::kLine) std::atomic<std::uint32_t> sleepers;  // peers asleep on one of this rank's counters
};

}  // namespace shm

}  // namespace ringrun::core
