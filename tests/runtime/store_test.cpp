// The rendezvous store: values, blocking gets, timeouts, and refusal of bad clients while the
// server goes on serving good ones.
#include <doctest/doctest.h>

#include <sys/socket.h>

#include <thread>

#include "ringrun/net.hpp"
#include "ringrun/store.hpp"

using namespace std::chrono_literals;
using ringrun::store::Client;
using ringrun::store::Server;

namespace {
const std::string kSecret(64, 'a');

// Sends raw bytes on a fresh connection and reports whether the server closed it afterwards.
bool server_closes_after(std::uint16_t port, const std::string& bytes) {
  auto fd = ringrun::net::connect_tcp("127.0.0.1", port, ringrun::net::Clock::now() + 5s);
  ringrun::net::write_all(fd.get(), bytes.data(), bytes.size(), ringrun::net::Clock::now() + 5s, "store");
  char c;
  try {
    // Either EOF (closed) or a reset; no answer is ever expected for these frames.
    ringrun::net::read_exact(fd.get(), &c, 1, ringrun::net::Clock::now() + 5s, "store");
    return false;
  } catch (const ringrun::net::NetTimeout&) {
    return false;
  } catch (const ringrun::net::NetError&) {
    return true;
  }
}

std::string header(std::uint32_t magic, unsigned char type, std::uint16_t key_len, std::uint32_t value_len) {
  unsigned char h[16] = {};
  ringrun::net::put_u32(h, magic);
  h[4] = type;
  h[6] = static_cast<unsigned char>(key_len);
  h[7] = static_cast<unsigned char>(key_len >> 8);
  ringrun::net::put_u32(h + 8, value_len);
  return std::string(reinterpret_cast<char*>(h), 16);
}
}  // namespace

TEST_CASE("store: set, get, blocking get and wait") {
  Server server("127.0.0.1", 0, kSecret);
  REQUIRE(server.port() != 0);
  Client a("127.0.0.1", server.port(), kSecret);
  Client b("127.0.0.1", server.port(), kSecret);
  a.set("x", std::string("\0binary\xff", 8));
  CHECK(b.get("x", 1s) == std::string("\0binary\xff", 8));
  CHECK_FALSE(b.try_get("nope").has_value());

  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    a.set("late", "value");
  });
  CHECK(b.get("late", 5s) == "value");
  setter.join();

  auto values = b.wait({"x", "late"}, 1s);
  CHECK(values[1] == "value");

  try {
    b.wait({"x", "m1", "m2"}, 100ms);
    FAIL("wait should time out");
  } catch (const ringrun::store::StoreTimeout& e) {
    CHECK(e.missing() == std::vector<std::string>{"m1", "m2"});
  }
  // A large value round-trips.
  std::string big(4 << 20, 'z');
  a.set("big", big);
  CHECK(b.get("big", 1s) == big);
}

TEST_CASE("store: a wait with an interrupt check asks it between slices and stops when it says so") {
  Server server("127.0.0.1", 0, kSecret);
  Client a("127.0.0.1", server.port(), kSecret);
  Client b("127.0.0.1", server.port(), kSecret);
  // Not interrupted: values come as without a check, a key set after several slices too.
  int asked = 0;
  auto never = [&] { return ++asked, false; };
  std::thread setter([&] {
    std::this_thread::sleep_for(350ms);
    a.set("slow", "v");
  });
  CHECK(b.wait({"slow"}, 5s, never) == std::vector<std::string>{"v"});
  setter.join();
  CHECK(asked >= 2);
  // Interrupted on the third question: about three slices, far from the timeout.
  asked = 0;
  auto third = [&] { return ++asked == 3; };
  const auto start = ringrun::net::Clock::now();
  CHECK_THROWS_AS(b.wait({"slow", "never"}, 30s, third), ringrun::store::StoreInterrupted);
  CHECK(asked == 3);
  CHECK(ringrun::net::Clock::now() - start < 5s);
  // Past the deadline it is a timeout, as without a check.
  CHECK_THROWS_AS(b.wait({"never"}, 150ms, never), ringrun::store::StoreTimeout);
}

TEST_CASE("store: wrong or missing secret is refused, garbage and oversized frames are dropped") {
  Server server("127.0.0.1", 0, kSecret);
  CHECK_THROWS_AS(Client("127.0.0.1", server.port(), std::string(64, 'b'), 2s), ringrun::store::StoreError);
  CHECK_THROWS_AS(Client("127.0.0.1", server.port(), "", 2s), ringrun::store::StoreError);
  // A secret that is a prefix of the real one is still wrong.
  CHECK_THROWS_AS(Client("127.0.0.1", server.port(), std::string(63, 'a'), 2s), ringrun::store::StoreError);

  CHECK(server_closes_after(server.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  // A SET before HELLO: refused without the secret.
  CHECK(server_closes_after(server.port(), header(0x31535252, 2, 1, 1) + "kv"));
  // An unauthenticated 4 GiB frame: refused on the header alone (nothing is allocated).
  CHECK(server_closes_after(server.port(), header(0x31535252, 1, 0, 0xffffffffu)));
  // A key length above the maximum.
  CHECK(server_closes_after(server.port(), header(0x31535252, 1, 60000, 0)));

  // After authenticating, an oversized value length is still rejected before allocation.
  {
    auto fd = ringrun::net::connect_tcp("127.0.0.1", server.port(), ringrun::net::Clock::now() + 5s);
    std::string hello = header(0x31535252, 1, 0, static_cast<std::uint32_t>(kSecret.size())) + kSecret;
    ringrun::net::write_all(fd.get(), hello.data(), hello.size(), ringrun::net::Clock::now() + 5s, "store");
    char reply[16];
    ringrun::net::read_exact(fd.get(), reply, 16, ringrun::net::Clock::now() + 5s, "store");
    std::string huge = header(0x31535252, 2, 1, 0xfffffff0u) + "k";
    ringrun::net::write_all(fd.get(), huge.data(), huge.size(), ringrun::net::Clock::now() + 5s, "store");
    CHECK_THROWS_AS(ringrun::net::read_exact(fd.get(), reply, 1, ringrun::net::Clock::now() + 5s, "store"),
                    ringrun::net::NetError);
  }

  // The server goes on serving good clients.
  Client good("127.0.0.1", server.port(), kSecret);
  good.set("k", "v");
  CHECK(good.get("k", 1s) == "v");
}

TEST_CASE("store: destroying the server with clients parked in a get") {
  auto server = std::make_unique<Server>("127.0.0.1", 0, kSecret);
  Client client("127.0.0.1", server->port(), kSecret);
  std::thread waiter([&] { CHECK_THROWS_AS(client.get("never", 30s), ringrun::store::StoreError); });
  std::this_thread::sleep_for(50ms);
  auto started = ringrun::net::Clock::now();
  server.reset();
  waiter.join();
  CHECK(ringrun::net::Clock::now() - started < 5s);
}
