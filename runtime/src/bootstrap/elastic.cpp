#include "bootstrap/elastic.hpp"

#include <climits>

#include <fmt/format.h>

#include "core/env.hpp"
#include "ringrun/elastic_wire.hpp"
#include "ringrun/runtime.hpp"
#include "ringrun/store.hpp"

namespace ringrun::core {
namespace {

namespace wire = store::elastic;

// The newest published epoch, or -1 when the launcher has published none yet.
int read_latest(store::Client& client) {
  const std::string key = wire::latest_key();
  auto value = client.try_get(key);
  if (!value) return -1;
  char* end = nullptr;
  const long latest = std::strtol(value->c_str(), &end, 10);
  if (value->empty() || *end != '\0' || latest < 0 || latest > INT_MAX)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("elastic store key '{}': value '{}' is not an epoch (a whole number >= 0)", key, *value));
  return static_cast<int>(latest);
}

wire::PublishedWorld decode(const std::string& value, const std::string& key) {
  try {
    return wire::decode_world(value, key);
  } catch (const std::invalid_argument& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, e.what());
  }
}

std::string seconds(std::chrono::milliseconds duration) { return fmt::format("{:g} s", duration.count() / 1000.0); }

}  // namespace

bool elastic_requested() { return env_set(variables::kElasticId).has_value(); }

ElasticSettings elastic_settings_from_environment() {
  ElasticSettings settings;
  auto id = env_integer(variables::kElasticId);
  if (!id) throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("elastic mode: {} is not set", variables::kElasticId.name));
  settings.id = static_cast<std::uint64_t>(*id);
  auto epoch = env_integer(variables::kElasticEpoch);
  if (!epoch)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("{} is set but {} is not: an elastic process needs the epoch of the world it was "
                                   "started for",
                                   variables::kElasticId.name, variables::kElasticEpoch.name));
  settings.start_epoch = static_cast<int>(*epoch);
  settings.timeout = env_seconds(variables::kElasticTimeout);
  settings.start_timeout = env_seconds(variables::kStartTimeout);
  auto store_address = env_text(variables::kStoreAddr);
  if (!store_address)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("{} is set but {} is not: elastic mode takes its worlds from the store that ringrun "
                                   "hosts",
                                   variables::kElasticId.name, variables::kStoreAddr.name));
  settings.store_address = *store_address;
  settings.secret = env_text(variables::kJobSecret).value_or("");
  return settings;
}

ElasticControl::ElasticControl(ElasticSettings settings)
    : settings_(std::move(settings)), control_(connect("the control connection")), epoch_(settings_.start_epoch) {}

ElasticControl::~ElasticControl() = default;

std::unique_ptr<store::Client> ElasticControl::connect(const char* what) const {
  try {
    auto where = net::parse_host_port(settings_.store_address);
    return std::make_unique<store::Client>(where.host, where.port, settings_.secret, settings_.start_timeout);
  } catch (const net::NetError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("elastic: {}: {}='{}': {}", what, variables::kStoreAddr.name,
                                                          settings_.store_address, e.what()));
  } catch (const store::StoreError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("elastic: {}: {}", what, e.what()));
  }
}

template <typename Body> auto ElasticControl::with_control(const char* what, Body&& body) {
  std::lock_guard lock(mutex_);
  try {
    return body(*control_);
  } catch (const store::StoreError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("elastic: {} through the store at {}: {}", what, control_->server(), e.what()));
  }
}

Bootstrap ElasticControl::join(int epoch) {
  std::unique_ptr<store::Client> client = connect("joining a world");
  // Blocks until the launcher publishes world `epoch`; refuses the end of the job.
  auto wait_for_world = [&](int e) {
    const std::string key = wire::world_key(e);
    std::string value;
    try {
      value = client->get(key, settings_.timeout);
    } catch (const store::StoreTimeout&) {
      throw RuntimeError(RINGRUN_ERR_TIMEOUT,
                         fmt::format("elastic: world {} was not published within {} (store key '{}', {}): is the "
                                     "launcher's elastic supervisor running?",
                                     e, seconds(settings_.timeout), key, variables::kElasticTimeout.name));
    }
    wire::PublishedWorld world = decode(value, key);
    if (world.end)
      throw RuntimeError(RINGRUN_ERR_REMOVED, fmt::format("elastic: the job ended ({}): process id {} has no next "
                                                          "world; finalize and exit",
                                                          world.reason, settings_.id));
    if (world.epoch != e)
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                         fmt::format("elastic store key '{}' holds world {}, not world {}", key, world.epoch, e));
    return world;
  };
  wire::PublishedWorld world;
  try {
    world = wait_for_world(epoch);
    // Worlds published meanwhile supersede it: the launcher always plans from the newest one.
    for (int latest = read_latest(*client); latest > world.epoch; latest = read_latest(*client))
      world = wait_for_world(latest);
  } catch (const store::StoreError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("elastic: joining world {}: {}", epoch, e.what()));
  }
  epoch_.store(world.epoch, std::memory_order_relaxed);
  const int rank = wire::rank_of(world, settings_.id);
  if (rank < 0)
    throw RuntimeError(RINGRUN_ERR_REMOVED,
                       fmt::format("elastic: process id {} is not in world {} (ids {}): it left or was removed; "
                                   "finalize and exit",
                                   settings_.id, world.epoch, fmt::join(world.ids, ",")));
  Bootstrap boot;
  boot.rank = rank;
  boot.size = static_cast<int>(world.ids.size());
  boot.hostname = this_hostname();
  boot.timeout = settings_.start_timeout;  // the mesh's connects; the exchange waits the elastic timeout
  boot.source = fmt::format("elastic world {} as id {} (store {})", world.epoch, settings_.id, settings_.store_address);
  if (auto interface = env_text(variables::kNetworkInterface)) boot.listen_address = interface_address(*interface);
  if (boot.size == 1) return boot;
  auto exchange = std::make_unique<StoreExchange>(std::move(client), wire::addr_prefix(world.epoch), boot.rank,
                                                  boot.size, settings_.timeout);
  if (boot.listen_address.empty()) boot.listen_address = exchange->local_address_hint();
  boot.exchange = std::move(exchange);
  return boot;
}

int ElasticControl::latest_epoch() {
  return with_control("reading the newest epoch", [](store::Client& c) { return read_latest(c); });
}

void ElasticControl::post_reset() {
  with_control("posting a reset request", [&](store::Client& c) {
    c.set(wire::reset_key(epoch()), std::to_string(settings_.id));
  });
}

void ElasticControl::post_leave() {
  with_control("posting a leave request", [&](store::Client& c) { c.set(wire::leave_key(settings_.id), "1"); });
}

void ElasticControl::post_failure() {
  with_control("posting a failure notice", [&](store::Client& c) { c.set(wire::failed_key(settings_.id), "1"); });
}

ElasticStatus ElasticControl::status() {
  return with_control("reading the newest world", [&](store::Client& c) {
    ElasticStatus status{epoch(), false};
    const int latest = read_latest(c);
    if (latest < 0) return status;
    status.latest_epoch = latest;
    // Added by any world since ours, not only the newest: a joiner of world e+1 that is still in
    // world e+2 (which only removed someone) needs the members' state all the same.
    for (int e = epoch() + 1; e <= latest && !status.added; ++e) {
      const std::string key = wire::world_key(e);
      if (auto value = c.try_get(key)) {
        wire::PublishedWorld world = decode(*value, key);
        status.added = !world.end && world.added;
      }
    }
    return status;
  });
}

}  // namespace ringrun::core
