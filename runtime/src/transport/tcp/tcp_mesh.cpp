#include "transport/tcp/tcp_mesh.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/env.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::core {
namespace {

constexpr std::uint32_t kHelloMagic = 0x32505252;  // "RRP2"
constexpr std::size_t kHelloBytes = 24;           // magic u32, rank u32, nonce u64, stream u32, streams u32
constexpr auto kSpinBeforePoll = std::chrono::microseconds(50);  // see progress()

}  // namespace

TcpMesh::TcpMesh(const World& world, net::Fd listener, std::chrono::milliseconds timeout, int streams)
    : streams_(streams), fds_(static_cast<std::size_t>(world.size * streams)), world_(world) {
  const auto deadline = net::Clock::now() + timeout;
  connect_to_lower(deadline);
  accept_from_higher(listener, deadline, timeout);
  configure_sockets();
}

// Lower ranks: connect and present the peer's nonce (it proves we read the job's rendezvous).
void TcpMesh::connect_to_lower(net::Clock::time_point deadline) {
  const int me = world_.rank;
  for (int peer = 0; peer < me; ++peer) {
    const PeerInfo& info = world_.peers[peer];
    for (int stream = 0; stream < streams_; ++stream) {
      try {
        net::Fd fd = net::connect_tcp(info.address, info.port, deadline);
        unsigned char hello[kHelloBytes];
        net::put_u32(hello, kHelloMagic);
        net::put_u32(hello + 4, static_cast<std::uint32_t>(me));
        net::put_u64(hello + 8, info.nonce);
        net::put_u32(hello + 16, static_cast<std::uint32_t>(stream));
        net::put_u32(hello + 20, static_cast<std::uint32_t>(streams_));
        net::write_all(fd.get(), hello, sizeof hello, deadline, world_.describe(peer));
        this->fd(peer, stream) = std::move(fd);
      } catch (const net::NetError& e) {
        throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("connecting to {} at {}:{}: {}", world_.describe(peer),
                                                              info.address, info.port, e.what()));
      }
    }
  }
}

// Higher ranks: accept until all have connected; a stray or malformed connection is dropped.
void TcpMesh::accept_from_higher(const net::Fd& listener, net::Clock::time_point deadline,
                                 std::chrono::milliseconds timeout) {
  const int me = world_.rank;
  int waiting = (world_.size - 1 - me) * streams_;
  while (waiting > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
    pollfd p{listener.get(), POLLIN, 0};
    int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left) + 1) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      std::vector<int> missing;
      for (int peer = me + 1; peer < world_.size; ++peer)
        for (int stream = 0; stream < streams_; ++stream)
          if (!this->fd(peer, stream)) {
            missing.push_back(peer);
            break;
          }
      throw RuntimeError(RINGRUN_ERR_TIMEOUT,
                         fmt::format("connecting the ranks: rank{} {} never connected to rank {} within {} ms",
                                     missing.size() > 1 ? "s" : "", rank_list(missing), me, timeout.count()));
    }
    net::Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    unsigned char hello[kHelloBytes];
    try {
      net::read_exact(fd.get(), hello, sizeof hello, std::min(deadline, net::Clock::now() + std::chrono::seconds(5)),
                      "a connecting peer");
    } catch (const net::NetError&) {
      continue;
    }
    std::uint32_t peer = net::get_u32(hello + 4), stream = net::get_u32(hello + 16);
    if (net::get_u32(hello) != kHelloMagic || net::get_u64(hello + 8) != world_.peers[me].nonce ||
        peer <= static_cast<std::uint32_t>(me) || peer >= static_cast<std::uint32_t>(world_.size) ||
        stream >= static_cast<std::uint32_t>(streams_) || this->fd(static_cast<int>(peer), static_cast<int>(stream))) {
      fmt::print(stderr, "ringrun: rank {} dropped a connection that is not from a peer of this job\n", me);
      continue;
    }
    // The communicator checked at rendezvous that every rank uses the same count.
    if (net::get_u32(hello + 20) != static_cast<std::uint32_t>(streams_))
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                         fmt::format("connecting the ranks: {} opens {} connections per peer ({}), rank {} {}; set the "
                                     "same value on every rank",
                                     world_.describe(static_cast<int>(peer)), net::get_u32(hello + 20),
                                     variables::kTcpStreams.name, me, streams_));
    net::set_nodelay(fd.get());
    this->fd(static_cast<int>(peer), static_cast<int>(stream)) = std::move(fd);
    --waiting;
  }
}

void TcpMesh::configure_sockets() {
  // Abortive close by default: a rank that crashes (or aborts) resets its connections at once.
  // An orderly close would queue its FIN behind unsent data that a peer may never read, and that
  // peer would not learn of the death.
  linger abortive{1, 0};
  // A peer whose host or link goes away sends no reset: without a bound the collective would wait
  // for it forever (or for the kernel's ~15 min of retransmissions).
  const auto peer_timeout = std::chrono::seconds(*env_integer(variables::kPeerTimeout));
  for (auto& fd : fds_) {
    if (!fd) continue;
    net::set_nonblocking(fd.get(), true);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
    net::set_peer_timeout(fd.get(), peer_timeout);
  }
}

TcpMesh::~TcpMesh() = default;

void TcpMesh::close(bool orderly) {
  // After the finalize barrier an orderly close lets the last bytes (our barrier header) arrive.
  linger off{0, 0};
  for (auto& fd : fds_) {
    if (fd && orderly) ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &off, sizeof off);
    fd.reset();
  }
}

void TcpMesh::peer_failed(int peer, const char* what, int error) {
  if (error == 0) {
    // When a rank dies, the rank that notices first fails and exits too, and a third rank may see
    // that exit first. Name every peer that has closed within a short grace period (a dying
    // process's sockets close one after another), so the one that died is named as well.
    std::vector<bool> closed(world_.size, false);
    closed[peer] = true;
    auto until = net::Clock::now() + std::chrono::milliseconds(20);
    do {
      std::vector<pollfd> fds;
      std::vector<int> peers;
      for (int other = 0; other < world_.size; ++other) {
        if (!fd(other) || closed[other]) continue;
        fds.push_back({fd(other).get(), POLLRDHUP, 0});
        peers.push_back(other);
      }
      if (fds.empty() || ::poll(fds.data(), fds.size(), 2) < 0) break;
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed[peers[i]] = true;
    } while (net::Clock::now() < until);
    std::vector<int> ranks;
    for (int r = 0; r < world_.size; ++r)
      if (closed[r]) ranks.push_back(r);
    if (ranks.size() == 1)
      throw RuntimeError(RINGRUN_ERR_PEER, fmt::format("{}: {} closed its connection", what, world_.describe(peer)));
    std::string names;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      names += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + world_.describe(ranks[i]);
    throw RuntimeError(RINGRUN_ERR_PEER, fmt::format("{}: {} closed their connections", what, names));
  }
  throw RuntimeError(RINGRUN_ERR_PEER,
                     fmt::format("{}: connection to {} failed: {}", what, world_.describe(peer), std::strerror(error)));
}

void TcpMesh::check_alive(const char* what) {
  std::vector<pollfd> fds;
  std::vector<int> peers;
  // A dead process resets all its connections; connection 0 of each peer tells.
  for (int peer = 0; peer < world_.size; ++peer) {
    if (!fd(peer)) continue;
    fds.push_back({fd(peer).get(), POLLRDHUP, 0});
    peers.push_back(peer);
  }
  if (fds.empty()) return;
  int ready = ::poll(fds.data(), fds.size(), 0);
  for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i)
    if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) peer_failed(peers[i], what, 0);
}

void TcpMesh::run(std::span<Transfer> transfers, const char* what, const std::function<bool()>& stop_early) {
  try {
    progress(transfers, what, stop_early, true);
  } catch (const RuntimeError& e) {
    // A rank that finds a disagreement stops and closes as soon as it has every header; its close
    // can reach this rank before the header that explains it has been read from another peer.
    // Read on for a moment: if the caller's condition is then met (it has found the
    // disagreement), that is what to report.
    if (!stop_early || e.code() != RINGRUN_ERR_PEER || !drain(transfers, stop_early)) throw;
  }
}

void TcpMesh::run_pairwise(std::span<Transfer> transfers, const char* what) { progress(transfers, what, {}, false); }

bool TcpMesh::drain(std::span<Transfer> transfers, const std::function<bool()>& stop_early) {
  const int channels = world_.size * streams_;
  std::vector<bool> ended(channels, false);
  const auto until = net::Clock::now() + std::chrono::milliseconds(100);
  std::vector<int> next_recv(channels);
  std::vector<pollfd> fds;
  while (net::Clock::now() < until) {
    if (stop_early()) return true;
    std::fill(next_recv.begin(), next_recv.end(), -1);
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      const Transfer& t = transfers[i];
      const int channel = t.peer * streams_ + t.stream;
      if (!t.send && t.done < t.len && next_recv[channel] < 0) next_recv[channel] = static_cast<int>(i);
    }
    bool progressed = false;
    fds.clear();
    for (int channel = 0; channel < channels; ++channel) {
      if (next_recv[channel] < 0 || ended[channel]) continue;
      Transfer& t = transfers[next_recv[channel]];
      const int socket = fds_[static_cast<std::size_t>(channel)].get();
      ssize_t got = ::recv(socket, t.data + t.done, t.len - t.done, MSG_DONTWAIT);
      if (got > 0) {
        t.done += static_cast<std::size_t>(got);
        t.ready = t.on_recv ? t.on_recv(t.done) : t.done;
        progressed = true;
      } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        ended[channel] = true;
      } else {
        fds.push_back({socket, POLLIN, 0});
      }
    }
    if (progressed) continue;
    if (fds.empty()) return stop_early();
    ::poll(fds.data(), fds.size(), 5);
  }
  return stop_early();
}

// The bytes of a send that may go now: all of them, or what the transfer it depends on has made ready.
static std::size_t sendable(const Transfer& t) { return t.available ? std::min(t.len, *t.available) : t.len; }

// Where one progress() run stands: per channel (peer * streams + stream) the first unfinished
// transfer in each direction, and the peers the run exchanges anything with.
struct TcpMesh::Channels {
  Channels(int peers, int streams, bool watch_others)
      : next_send(static_cast<std::size_t>(peers * streams), -1), next_recv(next_send), involved(peers, false),
        watch_others(watch_others) {}
  std::vector<int> next_send, next_recv;
  // Peers this run exchanges nothing with are watched for a hang-up (on connection 0): one of them
  // dying is why the peers we wait for may never send. A peer whose transfers here are done may
  // legitimately have moved on and closed (after the finalize barrier), so it is not watched.
  std::vector<bool> involved;
  // false (run_pairwise): peers this run exchanges nothing with may close in order (they finished
  // their part); only a reset (POLLERR: a rank that died or failed) counts against them.
  bool watch_others;
  std::vector<pollfd> fds;  // wait_for_sockets()'s, kept to spare an allocation per wait
  std::vector<int> poll_channel;

  // Finds the first unfinished transfer per channel and direction; false when none is left.
  bool scan(std::span<Transfer> transfers, int streams);
};

bool TcpMesh::Channels::scan(std::span<Transfer> transfers, int streams) {
  std::fill(next_send.begin(), next_send.end(), -1);
  std::fill(next_recv.begin(), next_recv.end(), -1);
  std::fill(involved.begin(), involved.end(), false);
  bool pending = false;
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    Transfer& t = transfers[i];
    involved[static_cast<std::size_t>(t.peer)] = true;
    if (t.done == t.len) continue;
    pending = true;
    auto& slot = t.send ? next_send[static_cast<std::size_t>(t.peer * streams + t.stream)]
                        : next_recv[static_cast<std::size_t>(t.peer * streams + t.stream)];
    if (slot < 0) slot = static_cast<int>(i);
  }
  return pending;
}

void TcpMesh::progress(std::span<Transfer> transfers, const char* what, const std::function<bool()>& stop_early,
                       bool watch_others) {
  Channels channels(world_.size, streams_, watch_others);
  std::chrono::steady_clock::time_point idle_since{};
  for (;;) {
    if (!channels.scan(transfers, streams_) || (stop_early && stop_early())) return;
    if (move_data(transfers, channels, what)) {
      idle_since = {};
      continue;
    }
    // Nothing moved: retry for a while, yielding the CPU between tries, before sleeping in poll().
    // A peer's answer on another host comes within tens of microseconds, and a wake-up from poll
    // costs about as much (4-byte allreduce between two namespace hosts 14-16 -> 9 us, Open MPI 10).
    const auto now = std::chrono::steady_clock::now();
    if (idle_since == std::chrono::steady_clock::time_point{}) idle_since = now;
    if (now - idle_since < kSpinBeforePoll) {
      sched_yield();
      continue;
    }
    idle_since = {};
    wait_for_sockets(transfers, channels, what);
  }
}

bool TcpMesh::move_data(std::span<Transfer> transfers, const Channels& channels, const char* what) {
  // Move what can move without waiting; the caller polls only when nothing moved.
  bool progressed = false;
  for (int channel = 0; channel < world_.size * streams_; ++channel) {
    const auto c = static_cast<std::size_t>(channel);
    const int peer = channel / streams_;
    const int socket = fds_[c].get();
    if (channels.next_recv[c] >= 0) {
      Transfer& t = transfers[static_cast<std::size_t>(channels.next_recv[c])];
      ssize_t got = ::recv(socket, t.data + t.done, t.len - t.done, MSG_DONTWAIT);
      if (got == 0) peer_failed(peer, what, 0);
      if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        peer_failed(peer, what, errno == ECONNRESET ? 0 : errno);
      if (got > 0) {
        t.done += static_cast<std::size_t>(got);
        t.ready = t.on_recv ? t.on_recv(t.done) : t.done;
        progressed = true;
      }
    }
    if (channels.next_send[c] >= 0) {
      Transfer& t = transfers[static_cast<std::size_t>(channels.next_send[c])];
      const std::size_t limit = sendable(t);
      if (limit > t.done) {
        ssize_t sent = ::send(socket, t.data + t.done, limit - t.done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          peer_failed(peer, what, (errno == EPIPE || errno == ECONNRESET) ? 0 : errno);
        if (sent > 0) {
          t.done += static_cast<std::size_t>(sent);
          progressed = true;
        }
      }
    }
  }
  return progressed;
}

void TcpMesh::wait_for_sockets(std::span<Transfer> transfers, Channels& channels, const char* what) {
  auto& fds = channels.fds;
  auto& poll_channel = channels.poll_channel;
  fds.clear();
  poll_channel.clear();
  for (int channel = 0; channel < world_.size * streams_; ++channel) {
    const auto c = static_cast<std::size_t>(channel);
    const int peer = channel / streams_, stream = channel % streams_;
    const net::Fd& socket = fds_[c];
    if (!socket) continue;
    short events = 0;
    if (channels.next_recv[c] >= 0) events |= POLLIN;
    const bool uninvolved = !channels.involved[static_cast<std::size_t>(peer)] && stream == 0;
    if ((uninvolved && channels.watch_others) || (channels.next_recv[c] < 0 && channels.next_send[c] >= 0))
      events |= POLLRDHUP;
    if (channels.next_send[c] >= 0) {
      const Transfer& t = transfers[static_cast<std::size_t>(channels.next_send[c])];
      if (sendable(t) > t.done) events |= POLLOUT;
    }
    // Done with it in this run (POLLHUP would be reported anyway); an uninvolved peer is still
    // polled, for POLLERR (always reported), under run_pairwise.
    if (events == 0 && !uninvolved) continue;
    fds.push_back({socket.get(), events, 0});
    poll_channel.push_back(channel);
  }
  int ready = ::poll(fds.data(), fds.size(), 1000);
  if (ready < 0 && errno != EINTR)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: poll(): {}", what, std::strerror(errno)));
  for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
    const int channel = poll_channel[i], peer = channel / streams_;
    const auto c = static_cast<std::size_t>(channel);
    short revents = fds[i].revents;
    bool reading = channels.next_recv[c] >= 0;
    // While reading, EOF is seen by recv() after the remaining data; otherwise a hang-up of a
    // watched peer (or of one we still send to) is final.
    const bool uninvolved = !channels.involved[static_cast<std::size_t>(peer)];
    bool watched = (uninvolved && channels.watch_others) || channels.next_send[c] >= 0;
    if (!reading && watched && (revents & (POLLRDHUP | POLLHUP))) peer_failed(peer, what, 0);
    if (!reading && (watched || uninvolved) && (revents & POLLERR)) {
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &error, &len);
      peer_failed(peer, what, error == ECONNRESET || error == EPIPE ? 0 : error);
    }
  }
}

std::vector<std::string> TcpMesh::exchange_all(const std::string& mine, const char* what) {
  return exchange_among(whole_world(world_), mine, what);
}

std::vector<std::string> TcpMesh::exchange_among(const Group& group, const std::string& mine, const char* what) {
  std::vector<std::string> all(group.ranks.size(), std::string(mine.size(), '\0'));
  all[static_cast<std::size_t>(group.index)] = mine;
  std::vector<Transfer> transfers;
  for (int i = 0; i < group.size(); ++i) {
    if (i == group.index) continue;
    const int peer = group.ranks[static_cast<std::size_t>(i)];
    transfers.push_back(send_to(peer, mine.data(), mine.size()));
    transfers.push_back(recv_from(peer, all[static_cast<std::size_t>(i)].data(), mine.size()));
  }
  run(transfers, what);
  return all;
}

}  // namespace ringrun::core
