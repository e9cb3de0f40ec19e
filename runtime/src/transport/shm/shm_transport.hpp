// Collectives through one POSIX shared-memory segment among ranks on this host (every rank of the
// job, or the ranks of this host in a multi-host job: see transport/hier/).
//
// Each rank owns two slots (double buffering by round parity) of slot_bytes in the segment, and
// counters that only it writes: per parity a post (its header, then the round it arrived at, in
// one line), and consumed (the last round it finished). Every collective is one round: it
// publishes its header with its arrival, so mismatches are seen before any data moves. Small
// allreduces (the latency path) give every rank the whole input and every rank reduces
// everything, in one synchronisation: up to 2132 bytes inline (32 in the post line itself, so one
// cache-line transfer carries flag, header and data; the rest 60 bytes a line, each line with its
// own round, so a reader polls all of them and their misses overlap), up to 8 KiB in the slot.
// Having seen every peer arrive at a round implies they finished the one before, so the next
// round need not read their consumed lines.
//
// Larger collectives stream through a ring of kRingDepth chunks of up to ring_bytes per rank, with
// per-chunk counters (chunk_arrived, chunk_reduced, chunk_consumed: global chunk numbers that keep
// counting across calls) instead of a barrier per phase. For an allreduce, step s of each rank
// exports chunk s (the parts of its input that the others own), reduces its own shard of chunk s-1
// from its input and the peers' ring chunks (in rank order, so results do not depend on who
// reduces) into its ring chunk and its output, and copies the others' results of chunk s-2 out of
// their ring chunks. Each wait is on what a peer did a step earlier, so ranks rarely block; the
// ring is small enough to stay in cache, so only the user's buffers touch DRAM, and large outputs
// are written with non-temporal stores. Waiting spins briefly, then
// yields, then sleeps on a futex with a short timeout during which it checks the TCP mesh, so a
// peer that dies is reported within milliseconds and oversubscribed ranks do not burn the CPUs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/tcp_mesh.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

namespace shm {
struct Control;  // a rank's control block in the segment (shm_layout.hpp)
}  // namespace shm

class ShmTransport final : public Transport {
 public:
  static constexpr std::size_t kDefaultSlotBytes = 256 * 1024;
  // A ring chunk's size for this many ranks on this host, from this core's L2 cache.
  static std::size_t default_ring_bytes(int ranks);
  // Broadcasts and allgathers up to this size take the latency path.
  static constexpr std::size_t kDirectMaxBytes = 16 * 1024;
  // Allreduces up to this size (and up to one slot) do: there every rank reduces all of the data,
  // which from about 16 KiB (2 ranks) costs more than the streamed path's extra synchronisation.
  static constexpr std::size_t kDirectAllreduceMaxBytes = 8 * 1024;
  // Chunks in flight per rank; the schedule needs at least 3 (export, reduce, collect).
  static constexpr std::uint32_t kRingDepth = 4;
  // Outputs of at least this many bytes are written with non-temporal stores (past the caches).
  static constexpr std::size_t kStreamMinBytes = 8 * 1024 * 1024;

  // Collective over every rank of mesh.world() (all on one host). Returns null, with the reason
  // in *why_not, when any rank cannot create or map the segment (then every rank gets null).
  // slot_bytes: 0 for the defaults (kDefaultSlotBytes slots, ring chunks of default_ring_bytes), or
  // the size of both (RINGRUN_SHM_SLOT_BYTES; tests use tiny ones).
  static std::unique_ptr<ShmTransport> create(TcpMesh& mesh, std::size_t slot_bytes, std::string* why_not);
  // The same among the ranks of group only (the ranks of one host in a multi-host job); ranks,
  // roots and errors inside the transport are group indices, errors name global ranks.
  static std::unique_ptr<ShmTransport> create(TcpMesh& mesh, Group group, std::size_t slot_bytes,
                                              std::string* why_not);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  bool scattered() const override { return true; }
  void allreduce_scattered(const OpHeader& header, std::span<const BufferSpan> spans) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;
  // Reduces every rank's count elements (header: an allreduce's) and leaves in recv only this
  // rank's block: elements [i q, (i+1) q) for group index i, q = count / ranks, the last block up
  // to count; the rest of recv is not written. recv may be send. One pass over the input: the
  // hierarchical allreduce's first phase. With bounds (one offset per group index and the count),
  // block i is [bounds[i], bounds[i+1]) and recv holds this rank's block alone (the reducescatter
  // collective).
  void reduce_scatter(const OpHeader& header, const void* send, void* recv, std::span<const std::size_t> bounds = {}) override;
  // One round in which every rank of the group posts its header, returning the group's verdict on
  // them instead of throwing (the same on every rank of the group): the barrier, and the
  // hierarchical transport's first step of every call (the step across hosts carries the verdict
  // to every rank).
  HeaderVerdict host_round(const OpHeader& header);
  // The same round carrying an allreduce of at most slot_bytes(): with no disagreement recv holds
  // the host's reduction in rank order (AVERAGE: the sum, for the caller to divide).
  HeaderVerdict host_allreduce(const OpHeader& header, const void* send, void* recv);
  std::size_t slot_bytes() const { return slot_bytes_; }

  using Control = shm::Control;  // shm_layout.hpp

 private:
  ShmTransport(TcpMesh& mesh, Group group, void* base, std::size_t bytes, std::size_t slot_bytes, std::size_t ring_bytes);
  Control& control(int rank) const;
  char* slot(int rank, std::uint32_t round) const;
  char* ring(int rank, std::uint32_t chunk) const;
  std::size_t chunk_bytes(std::size_t bytes, std::size_t pieces = 8) const;  // a ring chunk's share
  // Round protocol helpers.
  void begin_round(const OpHeader& header, bool first);  // waits until own slot may be rewritten
  void publish(std::atomic<std::uint32_t>& counter) { publish(counter, round_); }
  void publish(std::atomic<std::uint32_t>& counter, std::uint32_t value);
  // A latency round's arrival without publish()'s fence: the peers' lines are read while the
  // store drains (AMD EPYC, 2 ranks, allreduce: 1.07 us against 1.31 at 1 KiB;
  // runtime/bench/RESULTS.md, "Collectives: 2026-12-07 05:00 to 05:21 UTC: the benchmark's own
  // cost, and an arrival without a fence (small allreduces, AMD EPYC)"). Its sleepers are woken by
  // publish_after_arrival(), which every such round ends with: its fence orders both stores before
  // the look at the sleepers. A rank asleep in the round has arrived itself, so nobody waits on it
  // until then.
  void arrive_unfenced();
  void publish_after_arrival(std::atomic<std::uint32_t>& counter);
  // Starts a streamed collective of `chunks` ring chunks: one round whose arrived carries the
  // header, checked before any chunk is used (a rank may already have exported into its own ring
  // chunks). Returns the first chunk's global number.
  std::uint32_t begin_streamed(const OpHeader& header, std::size_t chunks);
  void reserve_ring(std::uint32_t chunk, const char* what);  // waits until ring(me, chunk) is free
  std::atomic<std::uint32_t>& arrived(int rank) const;  // its arrival flag for this round's parity
  void wait_arrived(const char* what);  // until every peer arrived at this round
  void wait_all(std::atomic<std::uint32_t> Control::*counter, std::uint32_t target, const char* what);
  void wait(int peer, std::atomic<std::uint32_t>& counter, std::uint32_t target, const char* what);
  OpHeader posted_header(int rank) const;  // the header rank posted for this round
  void check_headers(const OpHeader& header);
  HeaderVerdict host_verdict() const;
  class Pieces;
  // verdict: the host round's (host_allreduce): returned instead of thrown, the sum not divided.
  void allreduce_direct(const OpHeader& header, const Pieces& pieces, HeaderVerdict* verdict = nullptr);
  struct Streamed;  // one streamed allreduce (shm_transport.cpp); its three steps per chunk:
  void export_chunk(const Streamed& call, std::size_t k);
  void reduce_chunk(const Streamed& call, std::size_t k);
  void collect_chunk(const Streamed& call, std::size_t k);
  char* inline_input(int rank);  // rank's input of a small allreduce, gathered by collect_inline
  void post_inline(const char* input, std::size_t bytes);
  void collect_inline(std::size_t bytes);
  void own_next_post(std::size_t inline_bytes);  // takes back the next round's post (and inline lines)

  TcpMesh& mesh_;
  const World& world_;
  Group group_;  // the ranks sharing the segment; index = position of this rank's slots
  void* base_;
  std::size_t bytes_;
  std::size_t slot_bytes_;
  std::size_t ring_bytes_;  // one ring chunk
  std::chrono::microseconds spin_for_;  // kSpinFor, or 0 on an oversubscribed machine
  std::size_t inline_bytes_;  // allreduces up to this size go inline (the segment's creator chose it)
  bool own_inline_lines_;  // own_next_post takes the inline lines back too (no CLDEMOTE)
  std::uint32_t round_ = 0;  // last round started; every rank runs the same rounds
  std::uint32_t seen_arrived_ = 0;  // the last round every peer was seen arriving at
  std::uint32_t chunk_ = 0;  // last ring chunk used; every rank runs the same chunks
  std::vector<char> inputs_;  // every rank's input of a small allreduce (inline_input)
  std::vector<std::uint64_t> seen_;  // per rank: the inline lines collect_inline has copied
};

}  // namespace ringrun::core
