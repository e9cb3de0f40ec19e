// Attacks a running rendezvous store as a stranger would: `store_attack HOST:PORT`.
// Every attack must get nothing back (not a byte: no value, no error text, no secret) and see the
// connection closed; the program prints one line per attack and exits 1 when any got an answer or
// stayed open. It never knows the secret.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ringrun/net.hpp"
#include "ringrun/store_wire.hpp"

namespace {

using namespace std::chrono_literals;
using ringrun::net::Clock;
namespace wire = ringrun::store::wire;

std::string frame(unsigned char type, std::string_view key, std::string_view value) {
  wire::Header h;
  h.type = type;
  h.key_len = static_cast<std::uint16_t>(key.size());
  h.value_len = static_cast<std::uint32_t>(value.size());
  return wire::frame(h, key, value);
}

std::string raw_header(unsigned char type, std::uint16_t key_len, std::uint32_t value_len) {
  wire::Header h;
  h.type = type;
  h.key_len = key_len;
  h.value_len = value_len;
  auto bytes = wire::encode(h);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

struct Outcome {
  std::size_t received = 0;  // bytes the server sent
  bool closed = false;       // EOF or reset within the wait
  long long close_ms = -1;
};

// Sends `bytes`, then reads until the server closes or `wait` passes.
Outcome send_and_watch(const ringrun::net::HostPort& where, const std::string& bytes, std::chrono::milliseconds wait) {
  Outcome out;
  auto fd = ringrun::net::connect_tcp(where.host, where.port, Clock::now() + 5s);
  const auto start = Clock::now();
  if (!bytes.empty()) {
    try {
      ringrun::net::write_all(fd.get(), bytes.data(), bytes.size(), Clock::now() + 5s, "store");
    } catch (const ringrun::net::NetError&) {
      // The server may close before reading everything: that is a refusal too.
    }
  }
  const auto deadline = start + wait;
  while (Clock::now() < deadline) {
    pollfd p{fd.get(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(1, left))) <= 0) continue;
    char buffer[4096];
    const ssize_t got = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (got > 0) {
      out.received += static_cast<std::size_t>(got);
      continue;
    }
    out.closed = true;
    out.close_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: store_attack HOST:PORT\n");
    return 64;
  }
  const auto where = ringrun::net::parse_host_port(argv[1]);
  std::mt19937 random(12345);
  std::string garbage(4096, '\0');
  for (auto& c : garbage) c = static_cast<char>(random());

  struct Attack {
    const char* name;
    std::string bytes;
    std::chrono::milliseconds wait;  // how long the refusal may take
  };
  const std::vector<Attack> attacks = {
      {"wrong secret", frame(wire::kHello, "", "not-the-secret"), 3s},
      {"empty secret", frame(wire::kHello, "", ""), 3s},
      {"GET before HELLO", frame(wire::kGet, "ringrun/init0/0", ""), 3s},
      {"SET before HELLO", frame(wire::kSet, "ringrun/init0/0", "10.0.0.66:1"), 3s},
      {"random garbage", garbage, 3s},
      {"HTTP request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3s},
      {"oversized HELLO (4 GiB claimed)", raw_header(wire::kHello, 0, 0xffffffffu), 3s},
      {"oversized key (65535 claimed)", raw_header(wire::kHello, 0xffff, 1), 3s},
      {"wrong secret, then a GET in the same packet",
       frame(wire::kHello, "", "guess") + frame(wire::kGet, "ringrun/init0/0", ""), 3s},
      // Silence: the server drops a connection that never presents the secret (10 s).
      {"silent connection", "", 13s},
  };
  int failures = 0;
  for (const auto& attack : attacks) {
    const Outcome out = send_and_watch(where, attack.bytes, attack.wait);
    const bool ok = out.received == 0 && out.closed;
    failures += !ok;
    std::printf("%s: %s: %zu bytes back, %s\n", ok ? "ok" : "FAIL", attack.name, out.received,
                out.closed ? ("closed after " + std::to_string(out.close_ms) + " ms").c_str() : "still open");
    std::fflush(stdout);
  }
  // Many half-open strangers at once, each claiming the largest secret and sending one byte of it:
  // the server holds at most that much per connection and still serves the job (checked by the caller).
  std::vector<ringrun::net::Fd> strangers;
  const std::string partial = raw_header(wire::kHello, 0, 1024) + "x";
  for (int i = 0; i < 300; ++i) {
    try {
      auto fd = ringrun::net::connect_tcp(where.host, where.port, Clock::now() + 5s);
      ringrun::net::write_all(fd.get(), partial.data(), partial.size(), Clock::now() + 5s, "store");
      strangers.push_back(std::move(fd));
    } catch (const ringrun::net::NetError& e) {
      std::printf("FAIL: stranger %d could not connect: %s\n", i, e.what());
      ++failures;
      break;
    }
  }
  std::printf("%s: %zu half-open strangers connected\n", failures ? "FAIL" : "ok", strangers.size());
  std::fflush(stdout);
  // The caller samples the server's memory while these are open.
  if (const char* hold = std::getenv("STORE_ATTACK_HOLD_SECONDS")) ::sleep(static_cast<unsigned>(std::atoi(hold)));
  return failures ? 1 : 0;
}
