#include "ringrun/net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace ringrun::net {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

HostPort parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw NetError(fmt::format("address '{}' is not of the form host:port", text));
  HostPort result;
  result.host = text.substr(0, colon);
  if (result.host.size() >= 2 && result.host.front() == '[' && result.host.back() == ']')
    result.host = result.host.substr(1, result.host.size() - 2);
  unsigned long port = 0;
  for (char c : text.substr(colon + 1)) {
    if (c < '0' || c > '9') throw NetError(fmt::format("address '{}': port is not a number", text));
    port = port * 10 + static_cast<unsigned long>(c - '0');
    if (port > 65535) throw NetError(fmt::format("address '{}': port is above 65535", text));
  }
  result.port = static_cast<std::uint16_t>(port);
  return result;
}

sockaddr_in resolve_ipv4(const std::string& host, std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (host.empty() || host == "0.0.0.0" || host == "*") {
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    return address;
  }
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) == 1) return address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    throw NetError(fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)));
  address.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return address;
}

std::string format_address(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return fmt::format("{}:{}", text, ntohs(address.sin_port));
}

Fd listen_tcp(const std::string& bind_address, std::uint16_t port, int backlog) {
  sockaddr_in address = resolve_ipv4(bind_address, port);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw NetError(fmt::format("socket(): {}", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    throw NetError(fmt::format("cannot bind {}:{}: {}", bind_address, port, std::strerror(errno)));
  if (::listen(fd.get(), backlog) != 0)
    throw NetError(fmt::format("cannot listen on {}:{}: {}", bind_address, port, std::strerror(errno)));
  return fd;
}

sockaddr_in local_address(int fd) {
  sockaddr_in address{};
  socklen_t len = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  return address;
}

sockaddr_in peer_address(int fd) {
  sockaddr_in address{};
  socklen_t len = sizeof address;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &len);
  return address;
}

std::uint16_t local_port(int fd) { return ntohs(local_address(fd).sin_port); }

void set_nonblocking(int fd, bool nonblocking) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_peer_timeout(int fd, std::chrono::milliseconds timeout) {
  const int seconds = static_cast<int>(std::max<long long>(1, timeout.count() / 1000));
  const int one = 1, idle = std::max(1, seconds / 3), count = 3, interval = std::max(1, (seconds - idle) / count);
  const unsigned user_timeout_ms = static_cast<unsigned>(std::max<long long>(1000, timeout.count()));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

static int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000 * 1000 ? 1000 * 1000 : static_cast<int>(left) + 1;
}

Fd connect_tcp(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  sockaddr_in address = resolve_ipv4(host, port);
  auto delay = std::chrono::milliseconds(5);
  for (;;) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw NetError(fmt::format("socket(): {}", std::strerror(errno)));
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
    int error = rc == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int ready = ::poll(&p, 1, remaining_ms(deadline));
      if (ready == 0) {
        error = ETIMEDOUT;
      } else {
        socklen_t len = sizeof error;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
      }
    }
    if (error == 0) {
      set_nonblocking(fd.get(), false);
      set_nodelay(fd.get());
      return fd;
    }
    bool retry = error == ECONNREFUSED || error == ECONNRESET || error == ETIMEDOUT || error == EAGAIN;
    if (!retry || Clock::now() + delay >= deadline)
      throw (retry ? NetTimeout(fmt::format("cannot connect to {}:{}: {} (gave up at the deadline)", host,
                                            port, std::strerror(error)))
                   : NetError(fmt::format("cannot connect to {}:{}: {}", host, port, std::strerror(error))));
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(200));
  }
}

void read_exact(int fd, void* data, std::size_t len, Clock::time_point deadline, const std::string& peer) {
  auto* out = static_cast<char*>(data);
  while (len > 0) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) throw NetTimeout(fmt::format("timed out reading from {}", peer));
    ssize_t got = ::recv(fd, out, len, MSG_DONTWAIT);
    if (got == 0) throw NetError(fmt::format("{} closed the connection", peer));
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw NetError(fmt::format("reading from {}: {}", peer, std::strerror(errno)));
    }
    out += got;
    len -= static_cast<std::size_t>(got);
  }
}

void write_all(int fd, const void* data, std::size_t len, Clock::time_point deadline, const std::string& peer) {
  const auto* in = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t sent = ::send(fd, in, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        throw NetError(fmt::format("writing to {}: {}", peer, std::strerror(errno)));
      pollfd p{fd, POLLOUT, 0};
      int ready = ::poll(&p, 1, remaining_ms(deadline));
      if (ready == 0) throw NetTimeout(fmt::format("timed out writing to {}", peer));
      continue;
    }
    in += sent;
    len -= static_cast<std::size_t>(sent);
  }
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Walk the expected string fully; a shorter or longer candidate still costs the same loop.
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    unsigned char other = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned char>(static_cast<unsigned char>(a[i]) ^ other);
  }
  return difference == 0;
}

}  // namespace ringrun::net
