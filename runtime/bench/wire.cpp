#include "wire.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.hpp"

#include <ringrun/variable_read.hpp>

namespace ringrun::bench {
namespace {

constexpr std::size_t kStreamBytes = 64 * kMiB;  // per rank and direction in one sample
constexpr std::size_t kIoBytes = kMiB;           // one send()/recv(): the same buffer every time, in cache
constexpr int kSamples = 5;                      // after one warm-up; the median of the slowest rank's
constexpr int kPollTimeoutMs = 30000;            // a peer this silent is gone: fail, never hang

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket &) = delete;
  Socket &operator=(const Socket &) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail_errno(const std::string &what) {
  fail(fmt::format("wire bound: {}: {}", what, std::strerror(errno)));
}

// The address the runtime listens on, found the way its bootstrap finds it: the interface named by
// RINGRUN_NETWORK_INTERFACE, else the source address of the route to the store, else the hostname's.
in_addr_t probe_address() {
  namespace variables = ringrun::variables;
  if (const auto interface = variables::read_text(variables::kNetworkInterface)) {
    const char *name = interface->c_str();
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0) fail_errno("getifaddrs");
    std::optional<in_addr_t> found;
    for (ifaddrs *it = list; it && !found; it = it->ifa_next)
      if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET && std::strcmp(it->ifa_name, name) == 0)
        found = reinterpret_cast<sockaddr_in *>(it->ifa_addr)->sin_addr.s_addr;
    freeifaddrs(list);
    if (!found) fail(fmt::format("wire bound: {}='{}' has no IPv4 address", variables::kNetworkInterface.name, name));
    return *found;
  }
  std::string host;
  const char *port = "9";
  const std::string store = variables::read_text(variables::kStoreAddr).value_or("");
  const bool via_store = !store.empty() && store.rfind(':') != std::string::npos;
  if (via_store) {
    host = store.substr(0, store.rfind(':'));
  } else {
    std::array<char, 256> name{};
    ::gethostname(name.data(), name.size() - 1);
    host = name.data();
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *result = nullptr;
  if (getaddrinfo(host.c_str(), port, &hints, &result) != 0 || result == nullptr)
    fail(fmt::format("wire bound: cannot resolve {} (set {})", host, ringrun::variables::kNetworkInterface.name));
  sockaddr_in address = *reinterpret_cast<sockaddr_in *>(result->ai_addr);
  freeaddrinfo(result);
  if (!via_store) return address.sin_addr.s_addr;
  // A UDP "connect" only picks the route: its local end is the address peers reach this host at.
  Socket udp(::socket(AF_INET, SOCK_DGRAM, 0));
  socklen_t length = sizeof address;
  if (udp.get() < 0 || ::connect(udp.get(), reinterpret_cast<sockaddr *>(&address), sizeof address) != 0 ||
      ::getsockname(udp.get(), reinterpret_cast<sockaddr *>(&address), &length) != 0)
    fail_errno(fmt::format("finding the route to the store {}", store));
  return address.sin_addr.s_addr;
}

// One sample: send kStreamBytes on `out` while receiving as much on `in`; seconds on this rank.
double stream_both_ways(int out, int in, std::vector<char> &send_buffer, std::vector<char> &recv_buffer) {
  std::size_t sent = 0, received = 0;
  check_rc(ringrun_barrier(), "ringrun_barrier (wire bound)");
  const auto start = Clock::now();
  while (sent < kStreamBytes || received < kStreamBytes) {
    std::array<pollfd, 2> fds{pollfd{sent < kStreamBytes ? out : -1, POLLOUT, 0},
                              pollfd{received < kStreamBytes ? in : -1, POLLIN, 0}};
    const int ready = ::poll(fds.data(), fds.size(), kPollTimeoutMs);
    if (ready == 0) fail(fmt::format("wire bound: no progress in {} s (a peer stopped)", kPollTimeoutMs / 1000));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll");
    }
    if (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) {
      const ssize_t n = ::send(out, send_buffer.data(), std::min(kIoBytes, kStreamBytes - sent), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("send");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) {
      const ssize_t n = ::recv(in, recv_buffer.data(), std::min(kIoBytes, kStreamBytes - received), MSG_DONTWAIT);
      if (n == 0) fail("wire bound: the previous host's rank closed its stream");
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("recv");
      if (n > 0) received += static_cast<std::size_t>(n);
    }
  }
  return seconds_since(start);
}

// Whether the transport has a wire model here, decided alike on every rank; ranks per host in `local`.
bool modelled(std::string_view transport, int &local, std::string &why_not) {
  std::array<std::int64_t, 2> sizes{ringrun_local_size(), -ringrun_local_size()};  // max, -min
  check_rc(ringrun_allreduce(sizes.data(), sizes.data(), 2, RINGRUN_INT64, RINGRUN_MAX), "ringrun_allreduce (wire bound)");
  local = static_cast<int>(sizes[0]);
  if (ringrun_size() == local) {
    why_not = kOneHost;
  } else if (sizes[0] != -sizes[1]) {
    why_not = fmt::format("hosts with {} to {} ranks (transport {}): no wire model", -sizes[1], sizes[0], transport);
  } else if (transport != "shm+tcp" && !(transport == "tcp" && local == 1)) {
    why_not = fmt::format("no wire model for transport {} with {} ranks per host", transport, local);
  }
  return why_not.empty();
}

}  // namespace

std::optional<WireRate> measure_wire_rate(std::string_view transport, std::string &why_not) {
  int local = 1;
  if (!modelled(transport, local, why_not)) return std::nullopt;
  const int ranks = ringrun_size();
  const in_addr_t address = probe_address();
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_addr.s_addr = address;
  socklen_t length = sizeof where;
  if (listener.get() < 0 || ::bind(listener.get(), reinterpret_cast<sockaddr *>(&where), sizeof where) != 0 ||
      ::listen(listener.get(), 4) != 0 || ::getsockname(listener.get(), reinterpret_cast<sockaddr *>(&where), &length) != 0)
    fail_errno("listening");

  // Every rank's (local index, index among the ranks of that local index, address, port).
  const std::array<std::int64_t, 4> mine{ringrun_local_rank(), ringrun_cross_rank(), static_cast<std::int64_t>(address),
                                         ntohs(where.sin_port)};
  std::vector<std::int64_t> all(4 * static_cast<std::size_t>(ranks));
  check_rc(ringrun_allgather(mine.data(), 4, RINGRUN_INT64, all.data()), "ringrun_allgather (wire bound)");
  const int hosts = ranks / local;
  const std::int64_t next_cross = (mine[1] + 1) % hosts;
  int next = -1;
  for (int r = 0; r < ranks; ++r)
    if (all[4 * r] == mine[0] && all[4 * r + 1] == next_cross) next = r;
  if (next < 0) fail("wire bound: no rank of the next host with this local index");

  // Connect first, accept second: a connect completes in the peer's backlog, so no rank waits.
  Socket out(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_addr.s_addr = static_cast<in_addr_t>(all[4 * next + 2]);
  peer.sin_port = htons(static_cast<std::uint16_t>(all[4 * next + 3]));
  if (out.get() < 0 || ::connect(out.get(), reinterpret_cast<sockaddr *>(&peer), sizeof peer) != 0)
    fail_errno(fmt::format("connecting to rank {}", next));
  Socket in(::accept(listener.get(), nullptr, nullptr));
  if (in.get() < 0) fail_errno("accepting the previous host's stream");

  std::vector<char> send_buffer(kIoBytes, 1), recv_buffer(kIoBytes);
  std::vector<double> seconds;
  stream_both_ways(out.get(), in.get(), send_buffer, recv_buffer);  // warm-up: TCP's window opens
  for (int i = 0; i < kSamples; ++i) seconds.push_back(stream_both_ways(out.get(), in.get(), send_buffer, recv_buffer));
  max_over_ranks(seconds);
  WireRate rate;
  rate.hosts = hosts;
  rate.ranks_per_host = local;
  rate.host_GBps = static_cast<double>(kStreamBytes) * local / median(seconds) / 1e9;
  return rate;
}

double allreduce_wire_seconds(std::size_t bytes, const WireRate &rate) {
  const double hosts = rate.hosts;
  return 2.0 * (hosts - 1) / hosts * static_cast<double>(bytes) / (rate.host_GBps * 1e9);
}

std::string wire_header(const std::optional<WireRate> &rate, std::string_view why_not) {
  if (!rate) return fmt::format("# wire: {}: wire_frac not shown\n", why_not);
  return fmt::format(
      "# wire: {} hosts x {} ranks; raw TCP, every rank streaming {} MiB to the next host's rank of its local index "
      "while receiving from the previous one's (one connection each way, median of {} of the slowest rank): "
      "{:.2f} GB/s sent per host; wire_time = 2 (H-1)/H x size at that rate (the bytes a host sends in the ring "
      "over the hosts); wire_frac = wire_time / time_us, shown from {} MiB\n",
      rate->hosts, rate->ranks_per_host, kStreamBytes >> 20, kSamples, rate->host_GBps, kWireMinBytes >> 20);
}

}  // namespace ringrun::bench
