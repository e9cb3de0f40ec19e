// Collectives over the TCP mesh: every call first sends its header to every peer (so all ranks
// see a mismatch), then runs a ring (reduce-scatter + allgather, streamed through the poll loop:
// a segment is forwarded while it is still being received and reduced), or for small
// allreduces a direct exchange (everyone sends everything to everyone, one round trip).
#pragma once

#include <vector>

#include "transport/tcp/tcp_mesh.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpMesh& mesh) : mesh_(mesh) {}
  const char* name() const override { return "tcp"; }
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;

  // Allreduces of at most this many bytes use the direct exchange.
  static constexpr std::size_t kDirectMaxBytes = 16 * 1024;
  // A ring segment (the data one step moves) is at most this large; bigger messages run in pieces.
  static constexpr std::size_t kMaxSegmentBytes = 4u << 20;

 private:
  // Sends header to every peer and checks theirs (throws the mismatch on every rank). extra is
  // sent right behind the header to every peer (the direct allreduce's data).
  void exchange_headers(const OpHeader& header, const void* extra, std::size_t extra_bytes, char* extra_in);
  void ring_allreduce(const OpHeader& header, const char* send, char* recv, std::size_t count);

  TcpMesh& mesh_;
  std::vector<char> scratch_;  // persistent: grown, never shrunk
};

}  // namespace ringrun::core
