// One TCP connection (or `streams` of them, RINGRUN_TCP_STREAMS) to every other rank (non-blocking
// sockets) and a poll-driven progress loop that moves several transfers at once. Every wait also
// watches all other peers for a hang-up, so a rank that dies is reported by every rank within one
// poll, whatever the rank was waiting for. Connection 0 of a peer carries headers and small
// messages; the others only carry pieces of large transfers that a transport stripes across them.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ringrun/net.hpp"
#include <ringrun/environment_variables.hpp>

namespace ringrun::core {

struct Transfer {
  int peer = 0;
  int stream = 0;  // which of the connections to peer (0 .. streams - 1)
  bool send = false;
  char* data = nullptr;
  std::size_t len = 0;
  std::size_t done = 0;
  // Bytes that are ready for whoever depends on this transfer. For a receive, run() sets it to
  // the value on_recv returns (or to done without one); a send streams only up to *available.
  std::size_t ready = 0;
  const std::size_t* available = nullptr;
  std::function<std::size_t(std::size_t done)> on_recv;
};

inline Transfer send_to(int peer, const void* data, std::size_t len, const std::size_t* available = nullptr) {
  Transfer t;
  t.peer = peer;
  t.send = true;
  t.data = static_cast<char*>(const_cast<void*>(data));
  t.len = len;
  t.available = available;
  return t;
}

inline Transfer recv_from(int peer, void* data, std::size_t len,
                          std::function<std::size_t(std::size_t)> on_recv = {}) {
  Transfer t;
  t.peer = peer;
  t.data = static_cast<char*>(data);
  t.len = len;
  t.on_recv = std::move(on_recv);
  return t;
}

// RINGRUN_TCP_STREAMS's bound, from the table.
inline constexpr int kMaxTcpStreams = static_cast<int>(variables::kTcpStreams.max);

class TcpMesh {
 public:
  // Connects to every peer of world, `streams` connections each (every rank must pass the same):
  // accepts from higher ranks on listener, connects to lower ranks. Throws RuntimeError
  // (RINGRUN_ERR_BOOTSTRAP) naming the ranks that never connected.
  TcpMesh(const World& world, net::Fd listener, std::chrono::milliseconds timeout, int streams = 1);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  const World& world() const { return world_; }
  int streams() const { return streams_; }

  // Runs transfers until all are done, or until stop_early (checked after each progress) says
  // so. Transfers with the same peer, stream and direction proceed in the order given. what names
  // the collective in errors.
  void run(std::span<Transfer> transfers, const char* what, const std::function<bool()>& stop_early = {});

  // The same without watching the peers the transfers do not involve, for one step of a pattern in
  // which every rank takes part (recursive doubling): a rank that has done its last step may close
  // (finalize, or a mismatch found) while others still run theirs, in order. A peer that dies
  // resets its connections (they close abortively), and that is still seen here.
  void run_pairwise(std::span<Transfer> transfers, const char* what);

  // Throws RINGRUN_ERR_PEER if any peer has closed its connection (a non-blocking check).
  void check_alive(const char* what);

  // Small all-to-all: sends `mine` (len bytes) to every peer and returns everyone's in rank order.
  std::vector<std::string> exchange_all(const std::string& mine, const char* what);
  // The same among the ranks of group only (in group order); the others are watched for hang-ups.
  std::vector<std::string> exchange_among(const Group& group, const std::string& mine, const char* what);

  // Closes every connection: orderly (remaining data is delivered) after the finalize barrier,
  // else abortive (the peers see a reset at once, as when this process dies).
  void close(bool orderly);

 private:
  // The constructor's steps: connect to every lower rank, accept every higher one, then make every
  // socket non-blocking with an abortive close and a peer timeout.
  void connect_to_lower(net::Clock::time_point deadline);
  void accept_from_higher(const net::Fd& listener, net::Clock::time_point deadline, std::chrono::milliseconds timeout);
  void configure_sockets();
  void progress(std::span<Transfer> transfers, const char* what, const std::function<bool()>& stop_early,
                bool watch_others);
  struct Channels;
  bool move_data(std::span<Transfer> transfers, const Channels& channels, const char* what);  // true: bytes moved
  void wait_for_sockets(std::span<Transfer> transfers, Channels& channels, const char* what);  // poll(), hang-ups
  // After a peer closed during run(): reads what the other peers sent, for up to 100 ms, until
  // stop_early is true (then true) or nothing more arrives (then false).
  bool drain(std::span<Transfer> transfers, const std::function<bool()>& stop_early);
  [[noreturn]] void peer_failed(int peer, const char* what, int error);
  net::Fd& fd(int peer, int stream = 0) { return fds_[static_cast<std::size_t>(peer * streams_ + stream)]; }

  int streams_;
  std::vector<net::Fd> fds_;  // by rank * streams_ + stream; own rank's empty
  World world_;
};

}  // namespace ringrun::core
