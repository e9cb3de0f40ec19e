#include "ringrun/store.hpp"
#include "ringrun/environment_variables.hpp"
#include "ringrun/store_wire.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>

#include <fmt/format.h>

namespace ringrun::store {
namespace {

using namespace wire;
// An unauthenticated connection has this long to present the secret.
constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr std::size_t kMaxConnections = 4096;

}  // namespace

namespace wire {

std::array<unsigned char, kHeaderBytes> encode(const Header& h) {
  std::array<unsigned char, kHeaderBytes> out{};
  net::put_u32(out.data(), kMagic);
  out[4] = h.type;
  out[5] = h.status;
  out[6] = static_cast<unsigned char>(h.key_len);
  out[7] = static_cast<unsigned char>(h.key_len >> 8);
  net::put_u32(out.data() + 8, h.value_len);
  net::put_u32(out.data() + 12, h.timeout_ms);
  return out;
}

std::string decode(const unsigned char* in, bool authenticated, Header* h) {
  if (net::get_u32(in) != kMagic) return "bad frame magic (not a ringrun store client)";
  h->type = in[4];
  h->status = in[5];
  h->key_len = static_cast<std::uint16_t>(in[6] | (in[7] << 8));
  h->value_len = net::get_u32(in + 8);
  h->timeout_ms = net::get_u32(in + 12);
  if (h->key_len > kMaxKeyBytes)
    return fmt::format("key length {} exceeds the maximum {}", h->key_len, kMaxKeyBytes);
  std::size_t max_value = authenticated ? kMaxValueBytes : kMaxSecretBytes;
  if (h->value_len > max_value)
    return fmt::format("frame length {} exceeds the maximum {}", h->value_len, max_value);
  return "";
}

std::string frame(const Header& h, std::string_view key, std::string_view value) {
  auto head = encode(h);
  std::string out(reinterpret_cast<const char*>(head.data()), head.size());
  out += key;
  out += value;
  return out;
}

std::size_t FrameReader::feed(const char* data, std::size_t size, bool authenticated) {
  if (complete_ || !error_.empty()) return 0;
  std::size_t used = 0;
  if (head_got_ < kHeaderBytes) {
    std::size_t take = std::min(kHeaderBytes - head_got_, size);
    std::memcpy(head_ + head_got_, data, take);
    head_got_ += take;
    used += take;
    if (head_got_ < kHeaderBytes) return used;
    error_ = decode(head_, authenticated, &header_);
    if (!error_.empty()) return used;
    body_.assign(header_.key_len + static_cast<std::size_t>(header_.value_len), '\0');
    body_got_ = 0;
  }
  std::size_t take = std::min(body_.size() - body_got_, size - used);
  if (take > 0) std::memcpy(body_.data() + body_got_, data + used, take);
  body_got_ += take;
  used += take;
  complete_ = body_got_ == body_.size();
  return used;
}

void FrameReader::next_frame() {
  head_got_ = 0;
  body_.clear();
  body_.shrink_to_fit();
  body_got_ = 0;
  complete_ = false;
}

}  // namespace wire

struct Server::State {
  struct Connection {
    net::Fd fd;
    std::string peer;
    bool authenticated = false;
    bool closing = false;  // close once the output is flushed
    net::Clock::time_point accepted_at;
    FrameReader reader;  // the frame being read; its body is sized only after the header checks
    std::string output;
    bool waiting = false;  // a GET is parked until its key is set or it times out
    std::string waiting_key;
    net::Clock::time_point waiting_deadline;
  };

  std::string secret;
  net::Fd listener;
  net::Fd wakeup;  // eventfd: the destructor writes it to stop the thread
  std::uint16_t port = 0;
  std::map<std::string, std::string> values;
  std::list<Connection> connections;

  void run();
  void accept_all();
  void refuse(Connection& c, const std::string& why) {
    fmt::print(stderr, "ringrun store: refused connection from {}: {}\n", c.peer, why);
    c.fd.reset();
  }
  void drop(Connection& c, const std::string& why) {
    fmt::print(stderr, "ringrun store: closed connection from {}: {}\n", c.peer, why);
    c.fd.reset();
  }
  void reply(Connection& c, Status status, const std::string& value) {
    Header h;
    h.type = kReply;
    h.status = status;
    h.value_len = static_cast<std::uint32_t>(value.size());
    c.output += frame(h, "", value);
  }
  void read_from(Connection& c);
  void handle_frame(Connection& c);
  void flush(Connection& c);
  void wake_waiters(const std::string& key);
};

Server::Server(const std::string& bind_address, std::uint16_t port, std::string secret)
    : state_(std::make_unique<State>()) {
  if (secret.size() > kMaxSecretBytes)
    throw StoreError(fmt::format("store secret of {} bytes exceeds the maximum {}", secret.size(), kMaxSecretBytes));
  state_->secret = std::move(secret);
  try {
    state_->listener = net::listen_tcp(bind_address, port);
  } catch (const net::NetError& e) {
    throw StoreError(fmt::format("ringrun store: {}", e.what()));
  }
  state_->port = net::local_port(state_->listener.get());
  state_->wakeup = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!state_->wakeup) throw StoreError(fmt::format("ringrun store: eventfd(): {}", std::strerror(errno)));
  thread_ = std::thread([state = state_.get()] { state->run(); });
}

Server::~Server() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(state_->wakeup.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

std::uint16_t Server::port() const { return state_->port; }

void Server::State::run() {
  std::vector<pollfd> fds;
  std::vector<Connection*> owners;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({wakeup.get(), POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    auto now = net::Clock::now();
    auto next_deadline = now + std::chrono::seconds(1);
    for (auto& c : connections) {
      short events = POLLIN;
      if (!c.output.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      owners.push_back(&c);
      if (!c.authenticated) next_deadline = std::min(next_deadline, c.accepted_at + kHelloTimeout);
      if (c.waiting) next_deadline = std::min(next_deadline, c.waiting_deadline);
    }
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now).count();
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait_ms) + 1));
    if (ready < 0 && errno != EINTR) {
      fmt::print(stderr, "ringrun store: poll(): {}; stopping\n", std::strerror(errno));
      return;
    }
    if (ready > 0 && (fds[0].revents & POLLIN)) return;
    if (ready > 0 && (fds[1].revents & POLLIN)) accept_all();
    for (std::size_t i = 0; ready > 0 && i < owners.size(); ++i) {
      Connection& c = *owners[i];
      short revents = fds[i + 2].revents;
      if (c.fd && (revents & (POLLIN | POLLHUP | POLLERR))) read_from(c);
      if (c.fd && (revents & POLLOUT)) flush(c);
    }
    now = net::Clock::now();
    for (auto& c : connections) {
      if (!c.fd) continue;
      if (!c.authenticated && now >= c.accepted_at + kHelloTimeout) {
        refuse(c, "no secret presented within 10 s");
        continue;
      }
      if (c.waiting && now >= c.waiting_deadline) {
        c.waiting = false;
        reply(c, kStatusNotFound, "");
        flush(c);
      }
    }
    connections.remove_if([](const Connection& c) { return !c.fd; });
  }
}

void Server::State::accept_all() {
  for (;;) {
    sockaddr_in address{};
    socklen_t len = sizeof address;
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left; other errors are the client's problem
    if (connections.size() >= kMaxConnections) {
      fmt::print(stderr, "ringrun store: refused connection from {}: more than {} connections\n",
                 net::format_address(address), kMaxConnections);
      ::close(fd);
      continue;
    }
    net::set_nodelay(fd);
    Connection& c = connections.emplace_back();
    c.fd.reset(fd);
    c.peer = net::format_address(address);
    c.accepted_at = net::Clock::now();
  }
}

void Server::State::read_from(Connection& c) {
  char buffer[64 * 1024];
  for (;;) {
    ssize_t got = ::recv(c.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (got == 0) {
      // A client that leaves before authenticating is refused; one that leaves later just closed.
      if (!c.authenticated) refuse(c, "closed before presenting the secret");
      else c.fd.reset();
      return;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.fd.reset();
      return;
    }
    std::size_t offset = 0;
    while (offset < static_cast<std::size_t>(got) && c.fd) {
      offset += c.reader.feed(buffer + offset, static_cast<std::size_t>(got) - offset, c.authenticated);
      if (!c.reader.error().empty()) {
        if (c.authenticated) drop(c, c.reader.error());
        else refuse(c, c.reader.error());
        return;
      }
      if (c.reader.complete()) {
        handle_frame(c);
        c.reader.next_frame();
      }
    }
    if (!c.fd) return;
  }
}

void Server::State::handle_frame(Connection& c) {
  const Header& header = c.reader.header();
  std::string key(c.reader.key());
  if (!c.authenticated) {
    if (header.type != kHello) return refuse(c, "no secret presented");
    if (!net::constant_time_equal(secret, std::string(c.reader.value()))) return refuse(c, "bad secret");
    c.authenticated = true;
    reply(c, kStatusOk, "");
    return flush(c);
  }
  switch (header.type) {
    case kSet:
      values[key] = std::string(c.reader.value());
      reply(c, kStatusOk, "");
      flush(c);
      wake_waiters(key);
      return;
    case kGet: {
      auto found = values.find(key);
      if (found != values.end()) {
        reply(c, kStatusValue, found->second);
        return flush(c);
      }
      if (header.timeout_ms == 0) {
        reply(c, kStatusNotFound, "");
        return flush(c);
      }
      c.waiting = true;
      c.waiting_key = key;
      c.waiting_deadline = net::Clock::now() + std::chrono::milliseconds(header.timeout_ms);
      return;
    }
    default:
      return drop(c, fmt::format("unknown request type {}", static_cast<int>(header.type)));
  }
}

void Server::State::wake_waiters(const std::string& key) {
  const std::string& value = values[key];
  for (auto& other : connections) {
    if (other.fd && other.waiting && other.waiting_key == key) {
      other.waiting = false;
      reply(other, kStatusValue, value);
      flush(other);
    }
  }
}

void Server::State::flush(Connection& c) {
  while (!c.output.empty()) {
    ssize_t sent = ::send(c.fd.get(), c.output.data(), c.output.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.fd.reset();
      return;
    }
    c.output.erase(0, static_cast<std::size_t>(sent));
  }
}

// ---------------------------------------------------------------------------------------------

Client::Client(const std::string& host, std::uint16_t port, const std::string& secret, Duration connect_timeout)
    : server_(fmt::format("{}:{}", host, port)) {
  if (secret.size() > kMaxSecretBytes)
    throw StoreError(fmt::format("store secret of {} bytes exceeds the maximum {}", secret.size(), kMaxSecretBytes));
  try {
    fd_ = net::connect_tcp(host, port, net::Clock::now() + connect_timeout);
  } catch (const net::NetError& e) {
    throw StoreError(fmt::format("rendezvous store {}: {}", server_, e.what()));
  }
  try {
    Bytes ignored;
    request(kHello, "", secret, 0, &ignored);
  } catch (const StoreError& e) {
    throw StoreError(fmt::format("rendezvous store {} refused this client (is {} the job's?): {}", server_,
                                 variables::kJobSecret.name, e.what()));
  }
}

Client::Reply Client::request(unsigned char type, const std::string& key, const Bytes& value,
                              std::uint32_t timeout_ms, Bytes* reply_value) {
  if (key.size() > kMaxKeyBytes)
    throw StoreError(fmt::format("store key of {} bytes exceeds the maximum {}", key.size(), kMaxKeyBytes));
  if (value.size() > kMaxValueBytes)
    throw StoreError(fmt::format("store value for '{}' of {} bytes exceeds the maximum {}", key, value.size(),
                                 kMaxValueBytes));
  Header h;
  h.type = type;
  h.key_len = static_cast<std::uint16_t>(key.size());
  h.value_len = static_cast<std::uint32_t>(value.size());
  h.timeout_ms = timeout_ms;
  // The server answers a GET at its own deadline; allow generous slack for the round trip.
  auto deadline = net::Clock::now() + std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(30);
  try {
    std::string out = frame(h, key, value);
    net::write_all(fd_.get(), out.data(), out.size(), deadline, "the store " + server_);
    unsigned char head[kHeaderBytes];
    net::read_exact(fd_.get(), head, sizeof head, deadline, "the store " + server_);
    Header answer;
    std::string error = decode(head, true, &answer);
    if (!error.empty() || answer.type != kReply || answer.key_len != 0)
      throw StoreError(fmt::format("the store {} sent a malformed reply{}", server_, error.empty() ? "" : ": " + error));
    reply_value->assign(answer.value_len, '\0');
    net::read_exact(fd_.get(), reply_value->data(), answer.value_len, deadline, "the store " + server_);
    switch (answer.status) {
      case kStatusOk: return Reply::kOk;
      case kStatusValue: return Reply::kValue;
      case kStatusNotFound: return Reply::kNotFound;
      default: throw StoreError(fmt::format("the store {} answered with an error", server_));
    }
  } catch (const net::NetError& e) {
    throw StoreError(e.what());
  }
}

void Client::set(const std::string& key, const Bytes& value) {
  Bytes ignored;
  request(kSet, key, value, 0, &ignored);
}

std::optional<Bytes> Client::try_get(const std::string& key) {
  Bytes value;
  if (request(kGet, key, "", 0, &value) == Reply::kValue) return value;
  return std::nullopt;
}

Bytes Client::get(const std::string& key, Duration timeout) {
  Bytes value;
  auto ms = std::max<long long>(1, timeout.count());
  if (request(kGet, key, "", static_cast<std::uint32_t>(std::min<long long>(ms, 0x7fffffff)), &value) == Reply::kValue)
    return value;
  throw StoreTimeout(fmt::format("key '{}' was not set within {} ms", key, timeout.count()), {key});
}

std::vector<Bytes> Client::wait(const std::vector<std::string>& keys, Duration timeout,
                                const std::function<bool()>& interrupted) {
  auto deadline = net::Clock::now() + timeout;
  std::vector<Bytes> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    Reply reply;
    for (;;) {
      auto left = std::max(Duration::zero(), std::chrono::duration_cast<Duration>(deadline - net::Clock::now()));
      const Duration slice = interrupted ? std::min(left, kInterruptSlice) : left;
      reply = request(kGet, keys[i], "", static_cast<std::uint32_t>(slice.count()), &values[i]);
      if (reply == Reply::kValue || slice == left) break;
      if (interrupted())
        throw StoreInterrupted(fmt::format("interrupted while waiting for key '{}' ({} of {} keys set)", keys[i], i,
                                           keys.size()));
    }
    if (reply == Reply::kValue) continue;
    // Out of time: name every key still missing, not just the first.
    std::vector<std::string> missing;
    for (std::size_t j = i; j < keys.size(); ++j)
      if (!try_get(keys[j])) missing.push_back(keys[j]);
    throw StoreTimeout(fmt::format("{} of {} keys were not set within {} ms", missing.size(), keys.size(),
                                   timeout.count()),
                       std::move(missing));
  }
  return values;
}

sockaddr_in Client::local_address() const { return net::local_address(fd_.get()); }

}  // namespace ringrun::store
