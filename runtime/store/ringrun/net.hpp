// Small blocking-with-deadline socket helpers shared by the store and the runtime's TCP transport.
// Every helper throws ringrun::net::NetError with a message naming the peer and the cause.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ringrun::net {

using Clock = std::chrono::steady_clock;

class NetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A deadline passed before the operation could finish.
class NetTimeout : public NetError {
 public:
  using NetError::NetError;
};

// Owns one file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// "host:port" split at the last colon; throws NetError on a malformed address.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};
HostPort parse_host_port(const std::string& text);

// An IPv4 socket address from a host name or dotted quad (resolved with getaddrinfo).
sockaddr_in resolve_ipv4(const std::string& host, std::uint16_t port);
std::string format_address(const sockaddr_in& address);  // "1.2.3.4:5678"

// A listening TCP socket bound to bind_address:port (port 0 = any); non-blocking.
Fd listen_tcp(const std::string& bind_address, std::uint16_t port, int backlog = 1024);
std::uint16_t local_port(int fd);
sockaddr_in local_address(int fd);
sockaddr_in peer_address(int fd);

// Connects to host:port, retrying refused connections until the deadline (the other side may not
// be listening yet). The returned socket is blocking, with TCP_NODELAY set.
Fd connect_tcp(const std::string& host, std::uint16_t port, Clock::time_point deadline);

void set_nonblocking(int fd, bool nonblocking);
void set_nodelay(int fd);

// Reads or writes exactly len bytes before the deadline; NetError on EOF or error, NetTimeout on
// the deadline. Work on blocking and non-blocking sockets alike (they poll before each call).
void read_exact(int fd, void* data, std::size_t len, Clock::time_point deadline, const std::string& peer);
void write_all(int fd, const void* data, std::size_t len, Clock::time_point deadline, const std::string& peer);

// Compares every byte of both strings regardless of where they first differ (no timing leak of
// the position of the first difference; the length of the expected string may leak).
// A peer that stops answering (host down, link cut) fails the connection within about `timeout`:
// TCP keepalive probes on an idle connection, TCP_USER_TIMEOUT on unacknowledged data.
void set_peer_timeout(int fd, std::chrono::milliseconds timeout);

bool constant_time_equal(const std::string& a, const std::string& b);

// Little-endian fixed-width encoding for wire headers.
inline void put_u32(unsigned char* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint32_t get_u32(const unsigned char* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return v;
}
inline void put_u64(unsigned char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_u64(const unsigned char* in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace ringrun::net
