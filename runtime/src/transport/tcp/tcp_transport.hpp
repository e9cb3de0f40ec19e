// Collectives over the TCP mesh: every call first checks its header against every rank's (so all
// ranks see a mismatch), then runs a ring (reduce-scatter + allgather, streamed through the poll
// loop: a segment is forwarded while it is still being received and reduced); small allreduces
// travel with the check. Below kDoublingMinRanks the check is a direct exchange (everyone sends
// its header, and a small allreduce's data, to everyone: one round trip); from there recursive
// doubling (log2 n rounds with one peer each, the data reduced on the way).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "transport/tcp/tcp_mesh.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class TcpTransport final : public Transport {
 public:
  // Collectives among every rank of the mesh, or among the ranks of group only (over the mesh's
  // connections to them; every other peer is still watched for a hang-up while this one waits).
  // headers_checked_elsewhere: the caller compares every call's header among all ranks before it
  // calls this transport (the hierarchical transport does), so this one sends none: a round trip
  // less per call.
  explicit TcpTransport(TcpMesh& mesh) : TcpTransport(mesh, whole_world(mesh.world())) {}
  TcpTransport(TcpMesh& mesh, Group group, bool headers_checked_elsewhere = false)
      : mesh_(mesh), group_(std::move(group)), headers_checked_elsewhere_(headers_checked_elsewhere) {}
  const char* name() const override { return "tcp"; }
  // Sends header to every rank of the group and compares theirs: throws the mismatch on every rank
  // of the group (a barrier when every rank agrees).
  void check_headers(const OpHeader& header);
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;
  // Recursive doubling among the group, whatever its size (tcp_doubling.cpp): a header check that
  // reports a mismatch on every rank, carrying an allreduce of `bytes` (0: headers only) from send
  // to recv. seed: a disagreement this rank knows of already (the hierarchical transport's host
  // round: its ranks' verdict on their own headers); AVERAGE divides by divisor (0: the group's
  // size), so a group that reduces partial sums can divide by the world's size.
  void doubling(const OpHeader& header, const void* send, void* recv, std::size_t bytes,
                const HeaderVerdict& seed = {}, int divisor = 0);
  // The allgather without its header check, for a caller that has made it (the hierarchical one).
  void allgather_ring(const OpHeader& header, const void* send, void* recv);

  // tcp_scatter.cpp: the collectives in which every rank ends with a piece of its own.
  // alltoall moves exactly the bytes asked for: one transfer per pair of ranks, all at once.
  void alltoall(const OpHeader& header, const void* send, std::span<const std::size_t> to_each,
                const AlltoallOutput& output) override;
  // Reduces every rank's header.count elements and leaves block i = [bounds[i], bounds[i+1]) on
  // group index i, in recv (that block alone). A ring: every rank sends and receives (n-1)/n of
  // the data once, half of what an allreduce moves.
  void reduce_scatter(const OpHeader& header, const void* send, void* recv, std::span<const std::size_t> bounds) override;

  // Allreduces of at most this many bytes use the direct exchange.
  static constexpr std::size_t kDirectMaxBytes = 16 * 1024;
  // A ring segment (the data one step moves) is at most this large; bigger messages run in pieces.
  static constexpr std::size_t kMaxSegmentBytes = 4u << 20;
  // With several connections per peer (RINGRUN_TCP_STREAMS), a ring step, broadcast or allgather
  // block is striped across them in contiguous pieces of at least this many bytes, piece k on
  // connection k; smaller ones (and every header) use connection 0 alone.
  static constexpr std::size_t kMinStripeBytes = 64 * 1024;
  // Groups of at least this many ranks check headers, and allreduce up to kDirectMaxBytes, by
  // recursive doubling (log2 n rounds, one peer each) instead of an exchange with every peer
  // (n - 1 messages each way per rank).
  static constexpr int kDoublingMinRanks = 4;

 private:
  // Sends header to every peer and checks theirs (throws the mismatch on every rank). extra is
  // sent right behind the header to every peer (the direct allreduce's data). With
  // headers_checked_elsewhere_, only extra travels.
  void exchange_headers(const OpHeader& header, const void* extra, std::size_t extra_bytes, char* extra_in);
  void send_and_check_headers(const OpHeader& header, const void* extra, std::size_t extra_bytes, char* extra_in);
  const char* doubling_step(const OpHeader& header, int index, bool send, bool receive, const char* data,
                            std::size_t bytes, HeaderVerdict& verdict);
  bool doubles() const { return group_.size() >= kDoublingMinRanks; }
  void ring_allreduce(const OpHeader& header, const char* send, char* recv, std::size_t count);
  // Pieces a transfer of `bytes` is striped into: 1 .. mesh_.streams().
  int stripes(std::size_t bytes) const;

  int peer(int index) const { return group_.ranks[static_cast<std::size_t>(index)]; }

  TcpMesh& mesh_;
  Group group_;
  bool headers_checked_elsewhere_ = false;
  std::vector<char> scratch_;  // persistent: grown, never shrunk
  std::vector<char> outgoing_;  // a header with the data behind it, sent as one (persistent)
};

}  // namespace ringrun::core
