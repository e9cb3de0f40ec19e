// Process sets (process_sets.hpp): the table of sets, their creation through the world's engine,
// and the C API's ringrun_*process_set* calls.
#include "api/process_sets.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <fmt/format.h>

#include "bootstrap/bootstrap.hpp"
#include "api/process_runtime.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {
namespace {

struct ProcessSetState {
  std::vector<int> ranks;  // global ranks, ascending
  int index = -1;          // this rank's place among them; -1: not a member
  std::unique_ptr<core::Communicator> comm;  // members only
  std::unique_ptr<Engine> engine;            // members only
  std::atomic<std::uint64_t> routed_calls{0};
};

// The table, read by every submission to a set (shared) and changed by add and remove (unique).
std::shared_mutex& table_mutex() {
  static std::shared_mutex mutex;
  return mutex;
}
std::map<int, std::unique_ptr<ProcessSetState>>& table() {
  static std::map<int, std::unique_ptr<ProcessSetState>> sets;
  return sets;
}
// Stopped engines stay allocated until exit, as the world's do (engine_c_api.cpp): a handle may
// outlive its engine.
std::vector<std::unique_ptr<Engine>>& stopped_set_engines() {
  static std::vector<std::unique_ptr<Engine>> engines;
  return engines;
}
int g_next_id = 1;  // the same on every rank: sets are added by all ranks in the same order (add_mutex)
std::mutex& add_mutex() {  // one add or remove at a time on this rank (they are world collectives)
  static std::mutex mutex;
  return mutex;
}

std::uint64_t hash_ranks(const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranks and their count
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(ranks.size());
  for (int r : ranks) mix(static_cast<std::uint64_t>(r));
  return h;
}

// The rendezvous of a new set's communicator: one allgather of fixed-size records through the
// world's engine, in which every rank of the world takes part (non-members send no address).
// Each record: u64 hash of the caller's ranks, u32 address length, the address record.
class WorldExchange final : public core::Exchange {
 public:
  static constexpr std::size_t kRecordBytes = 1024;

  WorldExchange(std::string op_name, const ProcessSetState& set, std::uint64_t ranks_hash)
      : op_name_(std::move(op_name)), set_(set), hash_(ranks_hash) {}
  std::string name() const override { return "the world's engine (" + op_name_ + ")"; }

  std::vector<std::string> allgather(const std::string& mine) override {
    if (mine.size() > kRecordBytes - 12)
      throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: an address record of {} bytes", op_name_, mine.size()));
    Engine& world = world_engine(op_name_.c_str());
    const int size = world_size();
    std::vector<std::byte> record(kRecordBytes), all(kRecordBytes * static_cast<std::size_t>(size));
    std::memcpy(record.data(), &hash_, 8);
    const auto length = static_cast<std::uint32_t>(mine.size());
    std::memcpy(record.data() + 8, &length, 4);
    std::memcpy(record.data() + 12, mine.data(), mine.size());
    OpRequest r;
    r.kind = core::Collective::allgather;
    r.name = op_name_;
    r.send = record.data();
    r.recv = all.data();
    r.count = kRecordBytes;
    r.dtype = RINGRUN_UINT8;
    r.cacheable = false;
    OpRef op = world.submit(std::move(r));
    if (op->wait() != RINGRUN_OK) throw RuntimeError(op->code(), op->message());
    check_hashes(all, size);
    std::vector<std::string> records;
    for (int member : set_.ranks) {
      const std::byte* at = all.data() + static_cast<std::size_t>(member) * kRecordBytes;
      std::uint32_t n = 0;
      std::memcpy(&n, at + 8, 4);
      if (n > kRecordBytes - 12) throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: a malformed record", op_name_));
      records.emplace_back(reinterpret_cast<const char*>(at + 12), n);
    }
    return records;
  }

 private:
  static int world_size() {
    const int size = ringrun_size();
    if (size < 0) throw RuntimeError(size, "process sets: ringrun_init() has not been called");
    return size;
  }
  void check_hashes(const std::vector<std::byte>& all, int size) const {
    std::vector<int> differ;
    for (int r = 0; r < size; ++r) {
      std::uint64_t h = 0;
      std::memcpy(&h, all.data() + static_cast<std::size_t>(r) * kRecordBytes, 8);
      if (h != hash_) differ.push_back(r);
    }
    if (!differ.empty())
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                         fmt::format("{}: {} passed other ranks than this rank ({}); every rank must add the same process "
                                     "sets in the same order",
                                     op_name_, core::name_ranks(differ), ringrun_rank()));
  }

  std::string op_name_;
  const ProcessSetState& set_;
  std::uint64_t hash_;
};

std::vector<int> checked_ranks(const int* ranks, int n, int world) {
  if (!ranks || n <= 0)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_add_process_set: a process set needs at least one rank");
  std::vector<int> sorted(ranks, ranks + n);
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_add_process_set: a rank appears twice");
  if (sorted.front() < 0 || sorted.back() >= world)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("ringrun_add_process_set: rank {} is not in the job (0..{})",
                                   sorted.front() < 0 ? sorted.front() : sorted.back(), world - 1));
  return sorted;
}

// Creates the set's communicator (members) and takes part in the rendezvous (everyone).
void form(ProcessSetState& set, int id, std::uint64_t hash) {
  const std::string op_name = fmt::format("ringrun.process_set.{}.add", id);
  WorldExchange exchange(op_name, set, hash);
  // A communicator of one rank makes no rendezvous of its own: the world's still needs this rank.
  if (set.index < 0 || set.ranks.size() == 1) exchange.allgather("");
  if (set.index < 0) return;
  core::Communicator& world = *core::process_communicator();
  const core::PeerInfo& me = world.world().peers[static_cast<std::size_t>(world.rank())];
  const std::string address = me.address.empty() ? std::string("127.0.0.1") : me.address;
  core::CommunicatorConfig config = core::communicator_config(set.index, static_cast<int>(set.ranks.size()), me.host,
                                                              address, std::chrono::milliseconds(60000), &exchange);
  set.comm = core::Communicator::create(config);
  EngineConfig engine_config = EngineConfig::from_environment();
  engine_config.timeline_filename.clear();  // the world's rank 0 alone writes the timeline
  set.engine = std::make_unique<Engine>(*set.comm, std::move(engine_config));
}

int add_process_set(const int* ranks, int n) {
  std::lock_guard adding(add_mutex());
  const int world = ringrun_size();
  if (world < 0) throw RuntimeError(world, "ringrun_add_process_set: ringrun_init() has not been called");
  if (ringrun_elastic_enabled() == 1)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       "ringrun_add_process_set: process sets are not available in elastic mode (the world re-forms)");
  auto set = std::make_unique<ProcessSetState>();
  set->ranks = checked_ranks(ranks, n, world);
  const int me = ringrun_rank();
  const auto found = std::find(set->ranks.begin(), set->ranks.end(), me);
  set->index = found == set->ranks.end() ? -1 : static_cast<int>(found - set->ranks.begin());
  if (static_cast<int>(set->ranks.size()) == world)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       "ringrun_add_process_set: process set 0 (every rank) has these ranks already");
  {
    std::shared_lock read(table_mutex());
    for (const auto& [id, other] : table())
      if (other->ranks == set->ranks)
        throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                           fmt::format("ringrun_add_process_set: process set {} has these ranks already", id));
  }
  const int id = g_next_id++;
  form(*set, id, hash_ranks(set->ranks));
  std::unique_lock write(table_mutex());
  table().emplace(id, std::move(set));
  return id;
}

void stop_set(ProcessSetState& set) noexcept {
  if (set.engine) {
    try {
      set.engine->shutdown();
    } catch (...) {
    }
    try {
      stopped_set_engines().push_back(std::move(set.engine));
    } catch (...) {
      set.engine.reset();
    }
  }
  if (set.comm) {
    try {
      set.comm->finalize();
    } catch (...) {
    }
  }
}

void remove_process_set(int id) {
  std::lock_guard removing(add_mutex());
  std::unique_ptr<ProcessSetState> set;
  {
    std::unique_lock write(table_mutex());
    auto it = table().find(id);
    if (it == table().end())
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("ringrun_remove_process_set: no process set {}", id));
    set = std::move(it->second);
    table().erase(it);
  }
  stop_set(*set);
  // Every rank of the world passes here before any adds another set: the ids stay in step.
  OpRequest r;
  r.kind = core::Collective::barrier;
  r.name = fmt::format("ringrun.process_set.{}.remove", id);
  r.cacheable = false;
  OpRef op = world_engine("ringrun_remove_process_set").submit(std::move(r));
  if (op->wait() != RINGRUN_OK) throw RuntimeError(op->code(), op->message());
}

template <typename Body> decltype(auto) with_set(int id, const char* what, Body&& body) {
  std::shared_lock read(table_mutex());
  auto it = table().find(id);
  if (it == table().end())
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: no process set {} (add it with ringrun_add_process_set on every rank)", what, id));
  return body(*it->second);
}

template <typename Body> int c_call(Body&& body) {
  try {
    const int result = body();
    core::clear_error();
    return result;
  } catch (...) {
    return core::record_error(std::current_exception());
  }
}

}  // namespace

Engine& engine_of_set(int process_set, const char* what) {
  if (process_set == 0) return world_engine(what);
  return with_set(process_set, what, [&](ProcessSetState& set) -> Engine& {
    if (!set.engine)
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                         fmt::format("{}: rank {} is not in process set {} (ranks {})", what, ringrun_rank(), process_set,
                                     core::name_ranks(set.ranks)));
    return *set.engine;
  });
}

std::atomic<std::uint64_t>& routed_calls_of_set(int process_set) {
  if (process_set == 0) return world_routed_calls();
  return with_set(process_set, "process set", [](ProcessSetState& set) -> std::atomic<std::uint64_t>& { return set.routed_calls; });
}

void shutdown_process_sets() noexcept {
  std::map<int, std::unique_ptr<ProcessSetState>> sets;
  {
    std::unique_lock write(table_mutex());
    sets.swap(table());
  }
  for (auto& [id, set] : sets) stop_set(*set);
  g_next_id = 1;
}

}  // namespace ringrun::engine

extern "C" {

int ringrun_add_process_set(const int* ranks, int nranks) {
  return ringrun::engine::c_call([&] { return ringrun::engine::add_process_set(ranks, nranks); });
}

int ringrun_remove_process_set(int process_set) {
  return ringrun::engine::c_call([&] {
    ringrun::engine::remove_process_set(process_set);
    return 0;
  });
}

int ringrun_process_set_size(int process_set) {
  return ringrun::engine::c_call([&] {
    if (process_set == 0) return ringrun_size();
    return ringrun::engine::with_set(process_set, "ringrun_process_set_size",
                                     [](auto& set) { return static_cast<int>(set.ranks.size()); });
  });
}

int ringrun_process_set_rank(int process_set) {
  return ringrun::engine::c_call([&] {
    if (process_set == 0) return ringrun_rank();
    return ringrun::engine::with_set(process_set, "ringrun_process_set_rank", [&](auto& set) {
      if (set.index < 0)
        throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                                    fmt::format("ringrun_process_set_rank: rank {} is not in process set {}", ringrun_rank(),
                                                process_set));
      return set.index;
    });
  });
}

int ringrun_process_set_included(int process_set) {
  return ringrun::engine::c_call([&] {
    if (process_set == 0) return 1;
    return ringrun::engine::with_set(process_set, "ringrun_process_set_included", [](auto& set) { return set.index >= 0 ? 1 : 0; });
  });
}

}  // extern "C"
