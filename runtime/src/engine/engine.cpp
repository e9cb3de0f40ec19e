#include "engine/engine.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/env.hpp"
#include "engine/timeline.hpp"
#include "transport/nccl/device_memory.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

using Clock = std::chrono::steady_clock;
using core::Collective;

// ---------------------------------------------------------------------------------------------
// Configuration

EngineConfig EngineConfig::from_environment() {
  EngineConfig config;
  // Decimal numbers: the launcher passes --fusion-threshold-mb 0.5 and kin as given.
  if (auto mb = core::env_number("RINGRUN_FUSION_THRESHOLD_MB", 0, 1 << 20))
    config.fusion_threshold_bytes = static_cast<std::size_t>(*mb * (1 << 20));
  if (auto ms = core::env_number("RINGRUN_CYCLE_TIME_MS", 0, 60000))
    config.cycle_time = std::chrono::microseconds(static_cast<long long>(*ms * 1000));
  if (auto file = core::env_string("RINGRUN_TIMELINE_FILENAME")) config.timeline_filename = *file;
  if (auto s = core::env_number("RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS", 0, 1 << 24))
    config.stall_warning = std::chrono::milliseconds(static_cast<long long>(*s * 1000));
  if (auto s = core::env_number("RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", 0, 1 << 24))
    config.stall_shutdown = std::chrono::milliseconds(static_cast<long long>(*s * 1000));
  if (auto n = core::env_int("RINGRUN_CACHE_CAPACITY", 0, 1 << 20)) config.cache_capacity = static_cast<std::size_t>(*n);
  if (auto on = core::env_int("RINGRUN_FP16_COMPRESSION", 0, 1)) config.fp16_compression = *on == 1;
  if (auto n = core::env_int("RINGRUN_INLINE_BYTES", 0, 1 << 20)) config.inline_bytes = static_cast<std::size_t>(*n);
  if (auto on = core::env_int("RINGRUN_TIMELINE_MARK_CYCLES", 0, 1)) config.timeline_mark_cycles = *on == 1;
  if (auto n = core::env_int("RINGRUN_UNFUSED_MIN_BYTES", 0, 1ll << 40)) config.unfused_min_bytes = static_cast<std::size_t>(*n);
  return config;
}

// ---------------------------------------------------------------------------------------------
// OpState

void OpState::complete(int code, std::string message) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
    code_ = code;
    message_ = std::move(message);
  }
  done_cv_.notify_all();
}

int OpState::wait() {
  // Run the engine's cycles on this thread until the op is done: no hand-off to the background
  // thread and back. When another thread is in a cycle, block on the lock (no spinning): that
  // cycle may well complete this op.
  if (driver_ && !done_flag_.load(std::memory_order_acquire)) {
    driver_->waiters.fetch_add(1);
    for (;;) {
      std::unique_lock cycle(driver_->mutex);
      Engine* engine = driver_->engine;
      if (!engine || engine->finished_) {
        driver_->waiters.fetch_sub(1);
        break;
      }
      if (done_flag_.load(std::memory_order_acquire)) {
        // The last waiter to leave hands whatever is still pending back to the background thread.
        if (driver_->waiters.fetch_sub(1) == 1) engine->waiter_left();
        break;
      }
      engine->cycle_once();
    }
  }
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  return code_;
}

bool OpState::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

int OpState::code() const {
  std::lock_guard lock(mutex_);
  return code_;
}

std::string OpState::message() const {
  std::lock_guard lock(mutex_);
  return message_;
}

// ---------------------------------------------------------------------------------------------
// What ranks exchange

std::string Engine::Description::describe() const {
  switch (kind) {
    case Collective::allreduce: return fmt::format("allreduce {} {} of {}", core::dtype_name(dtype), core::op_name(op), count);
    case Collective::broadcast: return fmt::format("broadcast {} of {} from root {}", core::dtype_name(dtype), count, root);
    case Collective::allgather: return fmt::format("allgather {} of {}", core::dtype_name(dtype), count);
    case Collective::barrier: return "barrier";
  }
  return "unknown collective";
}

namespace {

enum RecordType : std::uint8_t { kRecordDescription = 1, kRecordStallFailure = 2 };
enum Flags : std::uint8_t { kFlagShutdown = 1, kFlagPending = 2 };
constexpr std::size_t kFixedHeaderBytes = 8;  // u32 payload bytes, u8 flags, 3 spare
constexpr std::size_t kInlineAlign = 16;      // each inline tensor starts aligned for any dtype
constexpr std::size_t kInlineMaxPending = 16;  // a rank with more pending ops sends no inline data

std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }

class Writer {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(static_cast<std::byte>(v)); }
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) {
    auto b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  Reader(const std::byte* data, std::size_t size) : data_(data), size_(size) {}
  bool more() const { return pos_ < size_; }
  std::uint8_t u8() {
    std::uint8_t v;
    raw(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    std::string s(u32(), '\0');
    raw(s.data(), s.size());
    return s;
  }

 private:
  void raw(void* p, std::size_t n) {
    if (pos_ + n > size_) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: truncated negotiation record");
    std::memcpy(p, data_ + pos_, n);
    pos_ += n;
  }
  const std::byte* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void check_argument(bool ok, const std::string& name, const char* why) {
  if (!ok) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("tensor '{}': {}", name, why));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Engine

Engine::Engine(core::Communicator& comm, EngineConfig config)
    : comm_(comm), config_(std::move(config)), rank_(comm.rank()), size_(comm.size()),
      shutdown_seen_(static_cast<std::size_t>(comm.size()), false), driver_(std::make_shared<CycleDriver>()),
      inline_capacity_(config_.inline_bytes / kInlineAlign * kInlineAlign) {
  driver_->engine = this;
  last_cycle_end_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  if (rank_ == 0 && !config_.timeline_filename.empty()) timeline_ = std::make_unique<Timeline>(config_.timeline_filename);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

std::shared_ptr<OpState> Engine::submit(OpRequest request) {
  const std::string& name = request.name;
  check_argument(!name.empty(), name, "an op needs a non-empty name");
  check_argument(core::valid_dtype(request.dtype), name, "unknown dtype");
  check_argument(request.kind != Collective::allreduce || core::valid_op(request.op), name, "unknown reduction op");
  if (request.count > 0) {
    if (request.kind == Collective::allreduce || request.kind == Collective::allgather)
      check_argument(request.send && request.recv, name, "send or recv is null");
    if (request.kind == Collective::broadcast) check_argument(request.recv != nullptr, name, "buffer is null");
  }
  if (request.kind == Collective::broadcast && (request.root < 0 || request.root >= size_))
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("tensor '{}': broadcast root {} is not a rank (size {})", name, request.root, size_));
  auto state = std::make_shared<OpState>(driver_);
  bool first_of_batch = false;
  {
    std::lock_guard lock(mutex_);
    if (broken_code_) throw RuntimeError(broken_code_, fmt::format("tensor '{}': {}", name, broken_message_));
    if (shutdown_requested_ || stopped_)
      throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("tensor '{}': the engine is shut down (ringrun_finalize)", name));
    if (local_names_.count(name))
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                         fmt::format("tensor '{}': an op of that name is already pending on rank {}", name, rank_));
    local_names_.emplace(name, true);
    first_of_batch = submitted_.empty();
    if (first_of_batch) batch_started_ = Clock::now();
    submitted_.push_back(LocalOp{std::move(request), state});
  }
  // Only the first submission of a batch wakes the background thread (one wake-up per step, not
  // one per tensor); it then lets the batch gather for config_.batch_window.
  if (first_of_batch) wake_.notify_one();
  return state;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
  // SCHED_BATCH: same share of the CPU, but a wake-up never preempts the thread running on the
  // core. Ranks are often bound to one core each, shared by the application's threads and this
  // one: a submission's wake-up would otherwise switch the core to this thread and back before
  // the submitter even reaches its wait. (Best effort: nothing depends on it.)
  sched_param batch{};
  (void)::sched_setscheduler(0, SCHED_BATCH, &batch);
  for (;;) {
    {
      // A batch of submissions runs once it is batch_window old (a backward pass submits its
      // gradients microseconds apart: one cycle for all of them, not one per tensor), a shutdown
      // at once; otherwise join a cycle when none ran for the cycle time (while anything is
      // pending anywhere) or the idle heartbeat, so that peers waiting in a cycle are never
      // stuck. A thread waiting for its op runs cycles itself, at once; while one does, the
      // background thread sleeps.
      std::unique_lock lock(mutex_);
      for (;;) {
        if (waiter_left_ || (shutdown_requested_ && !shutdown_sent_.load()) || finished_flag_.load()) break;
        const auto now = Clock::now();
        Clock::time_point due = Clock::time_point(Clock::duration(last_cycle_end_.load())) +
                                (active_.load() ? Clock::duration(config_.cycle_time) : Clock::duration(config_.idle_heartbeat));
        if (!submitted_.empty() && driver_->waiters.load() == 0) due = std::min(due, batch_started_ + config_.batch_window);
        if (now >= due) break;
        wake_.wait_until(lock, due);
      }
      waiter_left_ = false;
    }
    std::unique_lock cycle(driver_->mutex);
    if (finished_) break;
    cycle_once();
    if (finished_) break;
  }
  std::vector<LocalOp> leftover;
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    leftover.swap(submitted_);
  }
  for (auto& op : leftover)
    finish_local_op(op, RINGRUN_ERR_NOT_INITIALIZED,
                    fmt::format("tensor '{}': the engine stopped before the op was negotiated", op.request.name));
  {
    std::lock_guard cycle(driver_->mutex);
    driver_->engine = nullptr;  // waiters stop running cycles: the engine may go away now
  }
  if (timeline_) timeline_->flush();
}

void Engine::waiter_left() {
  {
    std::lock_guard lock(mutex_);
    if (submitted_.empty() && !active_.load()) return;
    waiter_left_ = true;
  }
  wake_.notify_one();
}

bool Engine::cycle_once() {
  std::vector<LocalOp> fresh;
  bool shutdown = false;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(submitted_);
    shutdown = shutdown_requested_;
  }
  bool ran_ops = false;
  try {
    const std::uint64_t completed_before = stats().completed;
    run_cycle(std::move(fresh), shutdown);
    ran_ops = stats().completed != completed_before;
    if (shutdown) shutdown_sent_.store(true);
    if (std::all_of(shutdown_seen_.begin(), shutdown_seen_.end(), [](bool b) { return b; })) finished_ = true;
  } catch (...) {
    // The communicator is broken (a peer died, a transport failed): nothing can run any more.
    std::string message = "the engine stopped";
    int code = RINGRUN_ERR_INTERNAL;
    try {
      throw;
    } catch (const RuntimeError& e) {
      code = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      message = fmt::format("engine: {}", e.what());
    } catch (...) {
    }
    {
      std::lock_guard lock(mutex_);
      broken_code_ = code;
      broken_message_ = message;
    }
    fail_everything(code, message);
    finished_ = true;
  }
  active_.store(anyone_active_ || !local_ops_.empty());
  last_cycle_end_.store(Clock::now().time_since_epoch().count());
  if (finished_) {
    {
      std::lock_guard lock(mutex_);
      finished_flag_.store(true);
    }
    wake_.notify_one();  // the background thread leaves its loop (a waiter may have run the last cycle)
  }
  return ran_ops;
}

void Engine::run_cycle(std::vector<LocalOp> fresh, bool shutdown) {
  const auto now = Clock::now();
  // One bit per cache entry in use (the same number on every rank: the cache changes only after
  // a cycle's agreement), so the record stays small until the cache fills.
  const std::size_t cache_entries = cache_.size();
  const std::size_t bit_bytes = (cache_entries + 7) / 8;
  // Then a second bit vector and an area of inline data: small cached allreduces pending here ride
  // along (see below). Only once the cache has entries, so the first cycles stay tiny.
  const std::size_t inline_bytes = cache_entries ? inline_capacity_ : 0;
  const std::size_t inline_bits_at = kFixedHeaderBytes + bit_bytes;
  // Aligned within the record, and records are whole multiples of kInlineAlign: the reduction
  // reads the data in place from the gathered records.
  const std::size_t inline_data_at = inline_bytes ? round_up(inline_bits_at + bit_bytes, kInlineAlign) : inline_bits_at;
  const std::size_t fixed_bytes = inline_data_at + inline_bytes;

  // This rank's record: cache bits for names the cache knows as submitted, full descriptions for
  // the rest, and (rank 0) the stall shutdowns it decided.
  std::vector<std::byte> mine(fixed_bytes, std::byte{0});
  Writer payload;
  std::size_t cached_count = 0;
  for (auto& op : fresh) {
    const OpRequest& r = op.request;
    Description d{r.name, r.kind, r.dtype, r.op, r.root, r.count, r.cacheable};
    auto cached = cache_index_.find(r.name);
    if (cached != cache_index_.end() && cache_[cached->second] == d) {
      mine[kFixedHeaderBytes + cached->second / 8] |= static_cast<std::byte>(1u << (cached->second % 8));
      ++cached_count;
    } else {
      payload.u8(kRecordDescription);
      payload.str(d.name);
      payload.u8(static_cast<std::uint8_t>(d.kind));
      payload.u8(static_cast<std::uint8_t>(d.dtype));
      payload.u8(static_cast<std::uint8_t>(d.op));
      payload.u8(d.cacheable ? 1 : 0);
      payload.u32(static_cast<std::uint32_t>(d.root));
      payload.u64(d.count);
    }
    std::string name = r.name;
    local_ops_.emplace(std::move(name), std::move(op));
  }
  // Inline data: every small allreduce pending here whose name the cache holds as described puts
  // its input in the record, in cache-bit order, each padded to kInlineAlign. When an op becomes
  // ready in a cycle whose records carry it from every rank, each rank reduces it from the records
  // in rank order: one synchronisation per op instead of two (negotiation, then the allreduce).
  // Only a handful of pending ops: with many, they fuse anyway, and scanning them every cycle costs.
  if (inline_bytes && local_ops_.size() <= kInlineMaxPending) {
    std::vector<std::pair<std::size_t, const OpRequest*>> candidates;
    for (const auto& [name, op] : local_ops_) {
      const OpRequest& r = op.request;
      const std::size_t bytes = r.count * core::dtype_size(r.dtype);
      if (r.kind != Collective::allreduce || !r.cacheable || bytes == 0 || bytes > inline_bytes) continue;
      auto cached = cache_index_.find(name);
      if (cached == cache_index_.end()) continue;
      const Description& d = cache_[cached->second];
      if (d.kind != r.kind || d.dtype != r.dtype || d.op != r.op || d.count != r.count) continue;
      if (core::locate_buffer(r.send).device) continue;
      candidates.emplace_back(cached->second, &r);
    }
    std::sort(candidates.begin(), candidates.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::size_t used = 0;
    for (auto& [bit, r] : candidates) {
      const std::size_t bytes = r->count * core::dtype_size(r->dtype);
      const std::size_t padded = round_up(bytes, kInlineAlign);
      if (used + padded > inline_bytes) continue;
      mine[inline_bits_at + bit / 8] |= static_cast<std::byte>(1u << (bit % 8));
      std::memcpy(mine.data() + inline_data_at + used, r->send, bytes);
      used += padded;
    }
  }
  std::vector<std::pair<std::string, std::string>> stall_failures;
  if (rank_ == 0) check_stalls(now, stall_failures);
  for (auto& [name, message] : stall_failures) {
    payload.u8(kRecordStallFailure);
    payload.str(name);
    payload.str(message);
  }
  const std::uint32_t payload_bytes = static_cast<std::uint32_t>(payload.bytes().size());
  std::memcpy(mine.data(), &payload_bytes, sizeof payload_bytes);
  std::uint8_t flags = (shutdown ? kFlagShutdown : 0) | (!local_ops_.empty() ? kFlagPending : 0);
  mine[4] = static_cast<std::byte>(flags);

  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.cycles;
    stats_.described_submissions += fresh.size() - cached_count;
    stats_.cached_submissions += cached_count;
  }
  std::vector<std::byte> all_fixed(fixed_bytes * static_cast<std::size_t>(size_));
  comm_.allgather(mine.data(), fixed_bytes, RINGRUN_UINT8, all_fixed.data());

  std::size_t max_payload = 0;
  for (int r = 0; r < size_; ++r) {
    std::uint32_t bytes;
    std::memcpy(&bytes, all_fixed.data() + static_cast<std::size_t>(r) * fixed_bytes, sizeof bytes);
    max_payload = std::max<std::size_t>(max_payload, bytes);
  }
  std::vector<std::byte> all_payload;
  if (max_payload > 0) {
    std::vector<std::byte> padded(max_payload, std::byte{0});
    std::copy(payload.bytes().begin(), payload.bytes().end(), padded.begin());
    all_payload.resize(max_payload * static_cast<std::size_t>(size_));
    comm_.allgather(padded.data(), max_payload, RINGRUN_UINT8, all_payload.data());
  }

  // Apply every rank's record, in rank order: every rank builds the same table.
  anyone_active_ = false;
  std::vector<std::pair<std::string, std::string>> agreed_stall_failures;
  std::vector<int> shutting_down;
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed.data() + static_cast<std::size_t>(r) * fixed_bytes;
    std::uint32_t bytes;
    std::memcpy(&bytes, fixed, sizeof bytes);
    auto peer_flags = static_cast<std::uint8_t>(fixed[4]);
    if (peer_flags & kFlagShutdown) {
      shutdown_seen_[static_cast<std::size_t>(r)] = true;
      shutting_down.push_back(r);
    }
    if (peer_flags & (kFlagShutdown | kFlagPending)) anyone_active_ = true;
    for (std::size_t bit = 0; bit < cache_entries; ++bit)
      if (static_cast<std::uint8_t>(fixed[kFixedHeaderBytes + bit / 8]) & (1u << (bit % 8)))
        apply_description(r, cache_[bit], now);
    if (inline_bytes) {
      std::size_t used = 0;
      for (std::size_t bit = 0; bit < cache_entries; ++bit) {
        if (!(static_cast<std::uint8_t>(fixed[inline_bits_at + bit / 8]) & (1u << (bit % 8)))) continue;
        const Description& d = cache_[bit];
        const std::size_t padded = round_up(d.count * core::dtype_size(d.dtype), kInlineAlign);
        if (used + padded > inline_bytes) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: inline data overflows its record");
        auto& sources = inline_sources_[d.name];
        sources.resize(static_cast<std::size_t>(size_), nullptr);
        sources[static_cast<std::size_t>(r)] = fixed + inline_data_at + used;
        used += padded;
      }
    }
    Reader reader(all_payload.data() + static_cast<std::size_t>(r) * max_payload, bytes);
    while (reader.more()) {
      auto type = reader.u8();
      if (type == kRecordDescription) {
        Description d;
        d.name = reader.str();
        d.kind = static_cast<Collective>(reader.u8());
        d.dtype = static_cast<ringrun_dtype>(reader.u8());
        d.op = static_cast<ringrun_op>(reader.u8());
        d.cacheable = reader.u8() != 0;
        d.root = static_cast<std::int32_t>(reader.u32());
        d.count = reader.u64();
        apply_description(r, d, now);
      } else if (type == kRecordStallFailure) {
        std::string name = reader.str();
        std::string message = reader.str();
        agreed_stall_failures.emplace_back(std::move(name), std::move(message));
      } else {
        throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: unknown negotiation record");
      }
    }
  }
  if (!table_.empty()) anyone_active_ = true;

  for (auto& [name, message] : agreed_stall_failures) fail_entry(name, RINGRUN_ERR_TIMEOUT, message);

  if (std::any_of(shutdown_seen_.begin(), shutdown_seen_.end(), [](bool b) { return b; })) {
    std::vector<int> finalizing;
    for (int r = 0; r < size_; ++r)
      if (shutdown_seen_[static_cast<std::size_t>(r)]) finalizing.push_back(r);
    fail_everything(RINGRUN_ERR_NOT_INITIALIZED,
                    fmt::format("ringrun_finalize() was called on {} while the op was pending", join_ranks(finalizing)));
    if (timeline_) timeline_->flush();
    return;
  }

  ++cycle_number_;
  if (timeline_ && config_.timeline_mark_cycles && !table_.empty()) timeline_->mark(fmt::format("cycle {}", cycle_number_), now);
  std::vector<std::pair<std::uint64_t, std::string>> ready;
  for (auto& [name, entry] : table_)
    if (entry.present == size_) ready.emplace_back(entry.seq, name);
  std::sort(ready.begin(), ready.end());
  std::vector<std::string> names;
  names.reserve(ready.size());
  for (auto& [seq, name] : ready) names.push_back(name);
  if (!names.empty()) execute(names);
  inline_sources_.clear();  // they point into this cycle's records
  if (timeline_) timeline_->flush();
}

void Engine::apply_description(int rank, const Description& description, Clock::time_point now) {
  auto [it, created] = table_.try_emplace(description.name);
  Entry& entry = it->second;
  if (created) {
    entry.seq = next_entry_seq_++;
    entry.per_rank.resize(static_cast<std::size_t>(size_));
    entry.arrival.resize(static_cast<std::size_t>(size_));
    entry.first_seen = now;
    entry.last_warned = now;
  }
  auto& slot = entry.per_rank[static_cast<std::size_t>(rank)];
  if (slot) throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: rank {} submitted '{}' twice", rank, description.name));
  // Everything but the name, which is the table's key: no string copy per rank and op.
  slot.emplace();
  slot->kind = description.kind;
  slot->dtype = description.dtype;
  slot->op = description.op;
  slot->root = description.root;
  slot->count = description.count;
  slot->cacheable = description.cacheable;
  entry.arrival[static_cast<std::size_t>(rank)] = now;
  ++entry.present;
}

void Engine::check_stalls(Clock::time_point now, std::vector<std::pair<std::string, std::string>>& to_fail) {
  const bool warn = config_.stall_warning.count() > 0;
  const bool stop = config_.stall_shutdown.count() > 0;
  if (!warn && !stop) return;
  for (auto& [name, entry] : table_) {
    if (entry.present == size_) continue;
    const auto age = now - entry.first_seen;
    const bool shut = stop && age >= config_.stall_shutdown;
    const bool warn_now = warn && age >= config_.stall_warning && (now - entry.last_warned >= config_.stall_warning ||
                                                                     entry.last_warned == entry.first_seen);
    if (!shut && !warn_now) continue;
    std::vector<int> submitted;
    std::string missing;
    std::string what;
    for (int r = 0; r < size_; ++r) {
      const auto& d = entry.per_rank[static_cast<std::size_t>(r)];
      if (d) {
        submitted.push_back(r);
        if (what.empty()) what = d->describe();
      } else {
        missing += (missing.empty() ? "" : ", ") + comm_.world().describe(r);
      }
    }
    std::string message = fmt::format("tensor '{}' ({}) has waited {:.1f} s: submitted by {}, not by {}", name, what,
                                      seconds(age), join_ranks(submitted), missing);
    if (shut) {
      to_fail.emplace_back(name, fmt::format("stalled: {} (RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS={:g})", message,
                                             seconds(config_.stall_shutdown)));
    } else {
      std::fprintf(stderr, "ringrun: stall warning: %s\n", message.c_str());
      entry.last_warned = now;
      if (timeline_) timeline_->mark("stall: " + name, now);
    }
  }
}

void Engine::finish_local_op(LocalOp& op, int code, std::string message) {
  {
    std::lock_guard lock(mutex_);
    local_names_.erase(op.request.name);
  }
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.completed;
  }
  op.state->complete(code, std::move(message));
}

void Engine::finish_local(const std::string& name, int code, std::string message) {
  auto it = local_ops_.find(name);
  if (it == local_ops_.end()) return;
  LocalOp op = std::move(it->second);
  local_ops_.erase(it);
  finish_local_op(op, code, std::move(message));
}

void Engine::fail_entry(const std::string& name, int code, const std::string& message) {
  table_.erase(name);
  finish_local(name, code, message.rfind("tensor '", 0) == 0 ? message : fmt::format("tensor '{}': {}", name, message));
}

void Engine::fail_everything(int code, const std::string& message) {
  std::vector<std::string> names;
  for (auto& [name, entry] : table_) names.push_back(name);
  for (auto& [name, op] : local_ops_) names.push_back(name);
  for (auto& name : names) fail_entry(name, code, message);
}

void Engine::update_cache(const std::string& name, const Description& shape) {
  if (!shape.cacheable || config_.cache_capacity == 0) return;
  Description description = shape;  // the table's copies leave the name out
  description.name = name;
  auto it = cache_index_.find(name);
  if (it != cache_index_.end()) {
    if (!(cache_[it->second] == description)) cache_[it->second] = std::move(description);
    cache_used_[it->second] = cycle_number_;
  } else if (cache_.size() < config_.cache_capacity) {
    cache_index_.emplace(name, cache_.size());
    cache_.push_back(description);
    cache_used_.push_back(cycle_number_);
  } else {
    // Full: the least recently used entry (the lowest bit among equals) makes room, as in
    // Horovod's response cache. Every rank completes the same ops in the same cycles, so every
    // rank evicts the same entry and the bits keep their meaning everywhere.
    const std::size_t victim =
        static_cast<std::size_t>(std::min_element(cache_used_.begin(), cache_used_.end()) - cache_used_.begin());
    cache_index_.erase(cache_[victim].name);
    cache_index_.emplace(name, victim);
    cache_[victim] = description;
    cache_used_[victim] = cycle_number_;
    std::lock_guard lock(stats_mutex_);
    ++stats_.cache_evictions;
  }
}

void Engine::execute(const std::vector<std::string>& ready) {
  const auto now = Clock::now();
  std::vector<LocalOp*> agreed;
  for (const auto& name : ready) {
    Entry& entry = table_.at(name);
    const Description& first = *entry.per_rank[0];
    bool same = std::all_of(entry.per_rank.begin(), entry.per_rank.end(), [&](const auto& d) { return *d == first; });
    if (timeline_) {
      for (int r = 0; r < size_; ++r)
        timeline_->tick(name, fmt::format("rank {} ready", r), entry.arrival[static_cast<std::size_t>(r)]);
      timeline_->span(name, "NEGOTIATE", entry.first_seen, now);
    }
    if (!same) {
      // Group the ranks by what they submitted: every rank gets the same message.
      std::vector<std::pair<std::string, std::vector<int>>> groups;
      for (int r = 0; r < size_; ++r) {
        std::string what = entry.per_rank[static_cast<std::size_t>(r)]->describe();
        auto g = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == what; });
        if (g == groups.end()) groups.push_back({what, {r}});
        else g->second.push_back(r);
      }
      std::string detail;
      for (auto& [what, ranks] : groups) detail += (detail.empty() ? "" : "; ") + join_ranks(ranks) + ": " + what;
      fail_entry(name, RINGRUN_ERR_MISMATCH, fmt::format("tensor '{}': ranks disagree: {}", name, detail));
      continue;
    }
    agreed.push_back(&local_ops_.at(name));
  }

  // Allreduces grouped by (dtype, op) in order of first appearance, then packed up to the
  // fusion threshold; everything else one by one after them. The same on every rank.
  std::vector<std::vector<LocalOp*>> groups;
  std::vector<LocalOp*> others;
  auto finish_ok = [&](LocalOp* op) {
    std::string name = op->request.name;
    update_cache(name, *table_.at(name).per_rank[0]);
    table_.erase(name);
    finish_local(name, RINGRUN_OK, "");
  };
  for (LocalOp*& op : agreed) {
    if (op->request.kind != Collective::allreduce) continue;
    auto found = inline_sources_.find(op->request.name);
    if (found == inline_sources_.end()) continue;
    const auto& sources = found->second;
    if (std::any_of(sources.begin(), sources.end(), [](const std::byte* p) { return p == nullptr; })) continue;
    const OpRequest& r = op->request;
    const auto start = Clock::now();
    // Rank order, as the transports do: every rank computes the same bits.
    if (size_ == 1) {
      std::memcpy(r.recv, sources[0], r.count * core::dtype_size(r.dtype));
    } else {
      core::reduce(r.recv, sources[0], sources[1], r.count, r.dtype, r.op);
      for (int p = 2; p < size_; ++p) core::reduce(r.recv, r.recv, sources[static_cast<std::size_t>(p)], r.count, r.dtype, r.op);
    }
    if (r.op == RINGRUN_AVERAGE) core::finish_average(r.recv, r.count, r.dtype, size_);
    if (timeline_) timeline_->span(r.name, "ALLREDUCE", start, Clock::now());
    {
      std::lock_guard lock(stats_mutex_);
      ++stats_.inline_allreduces;
    }
    finish_ok(op);
    op = nullptr;
  }
  std::erase(agreed, nullptr);
  for (LocalOp* op : agreed) {
    // Device buffers go to NCCL one by one: the fusion buffer is host memory and is filled with
    // memcpy. Programs keep a tensor on the same kind of memory on every rank, so every rank
    // still forms the same groups.
    // A large tensor also runs alone, on its own buffers: copying it into the fusion buffer and
    // back costs two passes over it, far more than the one synchronisation fusion would save.
    const std::size_t bytes = op->request.count * core::dtype_size(op->request.dtype);
    const bool compress = config_.fp16_compression && op->request.dtype == RINGRUN_FLOAT32;
    if (op->request.kind != Collective::allreduce || core::locate_buffer(op->request.recv).device ||
        (bytes >= config_.unfused_min_bytes && !compress)) {
      others.push_back(op);
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& group) {
      return group[0]->request.dtype == op->request.dtype && group[0]->request.op == op->request.op;
    });
    if (g == groups.end()) groups.push_back({op});
    else g->push_back(op);
  }
  for (auto& group : groups) {
    std::vector<LocalOp*> chunk;
    std::size_t chunk_bytes = 0;
    auto flush_chunk = [&] {
      if (chunk.empty()) return;
      execute_allreduce_group(chunk, now);
      for (LocalOp* op : chunk) finish_ok(op);
      chunk.clear();
      chunk_bytes = 0;
    };
    for (LocalOp* op : group) {
      std::size_t bytes = op->request.count * core::dtype_size(op->request.dtype);
      if (!chunk.empty() && chunk_bytes + bytes > config_.fusion_threshold_bytes) flush_chunk();
      chunk.push_back(op);
      chunk_bytes += bytes;
    }
    flush_chunk();
  }
  for (LocalOp* op : others) {
    execute_single(*op, now);
    finish_ok(op);
  }
}

void Engine::execute_allreduce_group(const std::vector<LocalOp*>& group, Clock::time_point ready_at) {
  const OpRequest& first = group[0]->request;
  const bool compress = config_.fp16_compression && first.dtype == RINGRUN_FLOAT32;
  if (group.size() == 1 && !compress) {
    const auto start = Clock::now();
    comm_.allreduce(first.send, first.recv, first.count, first.dtype, first.op);
    if (timeline_) {
      timeline_->span(first.name, "QUEUE", ready_at, start);
      timeline_->span(first.name, "ALLREDUCE", start, Clock::now());
    }
    return;
  }
  if (!compress && comm_.can_allreduce_scattered()) {
    // The transport reads every tensor in place and writes every result in place: no copies
    // into a fusion buffer and back, which cost as much as the allreduce itself.
    std::vector<core::BufferSpan> spans;
    spans.reserve(group.size());
    const std::size_t esize = core::dtype_size(first.dtype);
    for (LocalOp* op : group) spans.push_back({op->request.send, op->request.recv, op->request.count * esize});
    const auto start = Clock::now();
    comm_.allreduce_scattered(spans, first.dtype, first.op);
    {
      std::lock_guard lock(stats_mutex_);
      ++stats_.fused_allreduces;
      stats_.fused_tensors += group.size();
    }
    if (timeline_) {
      const auto end = Clock::now();
      for (LocalOp* op : group) {
        timeline_->span(op->request.name, "QUEUE", ready_at, start);
        timeline_->span(op->request.name, "ALLREDUCE", start, end);
      }
    }
    return;
  }
  const ringrun_dtype wire = compress ? RINGRUN_FLOAT16 : first.dtype;
  const std::size_t wire_element = core::dtype_size(wire);
  std::size_t total = 0;
  for (LocalOp* op : group) total += op->request.count;
  if (fusion_buffer_.size() < total * wire_element) fusion_buffer_.resize(total * wire_element);
  std::byte* buffer = fusion_buffer_.data();

  const auto copy_in_start = Clock::now();
  std::size_t offset = 0;
  for (LocalOp* op : group) {
    const OpRequest& r = op->request;
    if (compress) {
      auto src = static_cast<const float*>(r.send);
      auto dst = reinterpret_cast<std::uint16_t*>(buffer) + offset;
      for (std::size_t i = 0; i < r.count; ++i) dst[i] = core::float_to_half(src[i]);
    } else if (r.count) {
      std::memcpy(buffer + offset * wire_element, r.send, r.count * wire_element);
    }
    offset += r.count;
  }
  const auto reduce_start = Clock::now();
  comm_.allreduce(buffer, buffer, total, wire, first.op);
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.fused_allreduces;
    stats_.fused_tensors += group.size();
  }
  const auto copy_out_start = Clock::now();
  offset = 0;
  for (LocalOp* op : group) {
    const OpRequest& r = op->request;
    if (compress) {
      auto src = reinterpret_cast<const std::uint16_t*>(buffer) + offset;
      auto dst = static_cast<float*>(r.recv);
      for (std::size_t i = 0; i < r.count; ++i) dst[i] = core::half_to_float(src[i]);
    } else if (r.count) {
      std::memcpy(r.recv, buffer + offset * wire_element, r.count * wire_element);
    }
    offset += r.count;
  }
  if (timeline_) {
    const auto end = Clock::now();
    for (LocalOp* op : group) {
      timeline_->span(op->request.name, "QUEUE", ready_at, copy_in_start);
      timeline_->span(op->request.name, "MEMCPY_IN_FUSION_BUFFER", copy_in_start, reduce_start);
      timeline_->span(op->request.name, "ALLREDUCE", reduce_start, copy_out_start);
      timeline_->span(op->request.name, "MEMCPY_OUT_FUSION_BUFFER", copy_out_start, end);
    }
  }
}

void Engine::execute_single(LocalOp& op, Clock::time_point ready_at) {
  const OpRequest& r = op.request;
  const auto start = Clock::now();
  const char* phase = "BARRIER";
  switch (r.kind) {
    case Collective::allreduce:
      comm_.allreduce(r.send, r.recv, r.count, r.dtype, r.op);
      phase = "ALLREDUCE";
      break;
    case Collective::broadcast:
      comm_.broadcast(r.recv, r.count, r.dtype, r.root);
      phase = "BROADCAST";
      break;
    case Collective::allgather:
      comm_.allgather(r.send, r.count, r.dtype, r.recv);
      phase = "ALLGATHER";
      break;
    case Collective::barrier: comm_.barrier(); break;
  }
  if (timeline_) {
    timeline_->span(r.name, "QUEUE", ready_at, start);
    timeline_->span(r.name, phase, start, Clock::now());
  }
}

}  // namespace ringrun::engine
