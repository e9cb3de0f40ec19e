// The rendezvous store: a key-value store with blocking get, served by `ringrun` (or by rank 0 when
// a job is started with MASTER_ADDR/MASTER_PORT) and used by every rank to exchange addresses.
//
// Wire protocol (one TCP connection per client, requests answered in order): every frame is a
// 16-byte little-endian header {magic 'RRS1', type u8, status u8, key length u16, value length
// u32, timeout ms u32} followed by the key and the value. Lengths are checked against
// kMaxKeyBytes / kMaxValueBytes before anything is allocated. The first frame of a connection
// must be HELLO carrying the job secret; the server compares it in constant time and refuses the
// connection (one line on stderr) when it is missing or wrong.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringrun/net.hpp"

namespace ringrun::store {

using Bytes = std::string;  // values are arbitrary bytes
using Duration = std::chrono::milliseconds;

inline constexpr std::size_t kMaxKeyBytes = 1024;
inline constexpr std::size_t kMaxValueBytes = 16u << 20;
inline constexpr std::size_t kMaxSecretBytes = 1024;

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait ran out; missing() lists the keys that were never set.
class StoreTimeout : public StoreError {
 public:
  StoreTimeout(const std::string& message, std::vector<std::string> missing)
      : StoreError(message), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

// A wait gave up because its interrupted() check said so (e.g. Ctrl-C).
class StoreInterrupted : public StoreError {
 public:
  using StoreError::StoreError;
};

// How often a wait with an interrupted() check asks it: the longest a Ctrl-C waits to be seen.
inline constexpr Duration kInterruptSlice{100};

// A thread serving the store on bind_address:port until destroyed.
class Server {
 public:
  Server(const std::string& bind_address, std::uint16_t port /*0 = any*/, std::string secret);
  ~Server();  // stops, closes every socket, joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  std::uint16_t port() const;

  struct State;  // implementation detail (store.cpp)

 private:
  std::unique_ptr<State> state_;
  std::thread thread_;
};

// One authenticated connection to a Server. Not thread-safe: one caller at a time.
class Client {
 public:
  // Connects (retrying until connect_timeout: the server may still be starting) and presents the
  // secret. Throws StoreError when the server is unreachable or refuses the secret.
  Client(const std::string& host, std::uint16_t port, const std::string& secret,
         Duration connect_timeout = std::chrono::seconds(30));
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void set(const std::string& key, const Bytes& value);
  // Blocks until key is set; StoreTimeout after timeout.
  Bytes get(const std::string& key, Duration timeout);
  // The value if key is set now, nothing otherwise.
  std::optional<Bytes> try_get(const std::string& key);
  // Blocks until every key is set (values in the order of keys); StoreTimeout naming every key
  // still missing at the deadline. With `interrupted`, asks the server in slices of
  // kInterruptSlice and calls it between them: StoreInterrupted once it returns true.
  std::vector<Bytes> wait(const std::vector<std::string>& keys, Duration timeout,
                          const std::function<bool()>& interrupted = {});

  // The local address of the connection: the interface through which this host reaches the store.
  sockaddr_in local_address() const;
  const std::string& server() const { return server_; }

 private:
  enum class Reply { kOk, kValue, kNotFound };
  Reply request(unsigned char type, const std::string& key, const Bytes& value, std::uint32_t timeout_ms,
                Bytes* reply_value);

  net::Fd fd_;
  std::string server_;
};

}  // namespace ringrun::store
