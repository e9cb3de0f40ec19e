#include "engine/engine.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstdint>
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

namespace {

// Completion against a waiter going to sleep is a store-buffering pattern: the completer stores
// done_ then loads sleepers_, the waiter increments sleepers_ then loads done_; one of them must
// see the other. Here a seq_cst fence on each side orders them (a cycle's successes need
// neither: see Engine::complete_ok). ThreadSanitizer does not model fences (GCC refuses them
// under -fsanitize=thread), so there the accesses themselves are seq_cst instead: the same
// guarantee, per op.
#if defined(__SANITIZE_THREAD__)
#define RINGRUN_ENGINE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RINGRUN_ENGINE_TSAN 1
#endif
#endif
#ifndef RINGRUN_ENGINE_TSAN
#define RINGRUN_ENGINE_TSAN 0
#endif
constexpr bool kFences = !RINGRUN_ENGINE_TSAN;
constexpr std::memory_order kDoneStore = kFences ? std::memory_order_release : std::memory_order_seq_cst;
constexpr std::memory_order kDoneLoad = kFences ? std::memory_order_acquire : std::memory_order_seq_cst;
constexpr std::memory_order kSleepersLoad = kFences ? std::memory_order_relaxed : std::memory_order_seq_cst;

void full_fence() {
#if !RINGRUN_ENGINE_TSAN
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace

namespace {

// A thread's recycled states, last in first out. Plain thread-locals (no destructor of their own,
// so a state let go during the thread's or the process's exit still finds them); a closer drains
// the list when the thread exits and marks it closed: later states are deleted at once.
struct FreeStates {
  OpState* head = nullptr;
  std::size_t count = 0;
  bool closed = false;
  bool closer_armed = false;
};
thread_local FreeStates t_free_states;
// A thread that only ever lets go last (a background thread completing ops nobody waits for
// first) would otherwise hoard them.
constexpr std::size_t kMaxFreeStates = 4096;

}  // namespace

struct OpStateFreeList {
  static void drain(FreeStates& list) {
    while (OpState* state = list.head) {
      list.head = state->next_free_;
      delete state;
    }
    list.count = 0;
  }
  static void push(OpState* state);
  ~OpStateFreeList() {
    drain(t_free_states);
    t_free_states.closed = true;
  }
};

namespace {
thread_local OpStateFreeList t_free_states_closer;
}  // namespace

void OpStateFreeList::push(OpState* state) {
  FreeStates& list = t_free_states;
  if (list.closed || list.count >= kMaxFreeStates) {
    delete state;
    return;
  }
  if (!list.closer_armed) {
    list.closer_armed = true;
    (void)&t_free_states_closer;  // constructs it: its destructor runs at this thread's exit
  }
  state->next_free_ = list.head;
  list.head = state;
  ++list.count;
}

std::pair<OpRef, OpRef> OpState::create(CycleDriver* driver) {
  FreeStates& list = t_free_states;
  OpState* state = list.head;
  if (state) {
    list.head = state->next_free_;
    --list.count;
  } else {
    state = new OpState;
  }
  state->driver_ = driver;
  return {OpRef::adopt(state), OpRef::adopt(state)};
}

void OpState::let_go() {
  // The first party only says so; the second then knows the first is done with the state (the
  // exchange is acq_rel) and recycles it, as new.
  if (!let_go_.exchange(true, std::memory_order_acq_rel)) return;
  done_.store(false, std::memory_order_relaxed);
  let_go_.store(false, std::memory_order_relaxed);
  sleepers_.store(0, std::memory_order_relaxed);
  code_ = 0;
  message_.clear();
  OpStateFreeList::push(this);
}

void OpState::complete(int code, std::string message) {
  if (!complete_quietly(code, std::move(message))) return;
  full_fence();
  wake_sleepers();
}

bool OpState::complete_quietly(int code, std::string message) {
  if (done_.load(std::memory_order_relaxed)) return false;
  code_ = code;
  if (!message.empty()) message_ = std::move(message);
  done_.store(true, kDoneStore);
  return true;
}

void OpState::wake_sleepers() {
  // After a seq_cst fence that follows the store of done_, against the sleeper's increment, fence,
  // then load: either it sees done_ or this sees it sleeping.
  if (sleepers_.load(kSleepersLoad) > 0) done_.notify_all();
}

int OpState::wait() {
  // Run the engine's cycles on this thread until the op is done: no hand-off to the background
  // thread and back. When another thread is in a cycle, block on the lock (no spinning): that
  // cycle may well complete this op. A waiter counts itself in `waiters` (the background thread
  // then stands back) once it has to block or to run a second cycle; one that gets the lock at
  // once and is done after one cycle, a lone op's case, skips two locked instructions.
  if (driver_ && !done()) {
    std::unique_lock cycle(driver_->mutex, std::try_to_lock);
    bool counted = !cycle.owns_lock();
    if (counted) {
      driver_->waiters.fetch_add(1);
      cycle.lock();
    }
    // The last waiter to leave hands whatever is still pending back to the background thread.
    auto leave = [&](Engine* engine) {
      const int others = counted ? driver_->waiters.fetch_sub(1) - 1 : driver_->waiters.load();
      if (engine && others == 0) engine->waiter_left();
    };
    for (;;) {
      Engine* engine = driver_->engine;
      if (!engine || engine->finished_) {
        leave(nullptr);
        break;
      }
      if (done()) {
        leave(engine);
        break;
      }
      engine->cycle_once();
      if (done() && !engine->finished_) {
        leave(engine);
        break;
      }
      cycle.unlock();
      if (!counted) {
        driver_->waiters.fetch_add(1);
        counted = true;
      }
      cycle.lock();
    }
  }
  if (!done_.load(std::memory_order_acquire)) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    full_fence();
    while (!done_.load(kDoneLoad)) done_.wait(false, kDoneLoad);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  return code_;
}

int OpState::code() const { return done() ? code_ : 0; }

std::string OpState::message() const { return done() ? message_ : std::string(); }

// ---------------------------------------------------------------------------------------------
// What ranks exchange

std::string Engine::Shape::describe() const {
  switch (kind) {
    case Collective::allreduce: return fmt::format("allreduce {} {} of {}", core::dtype_name(dtype), core::op_name(op), count);
    case Collective::broadcast: return fmt::format("broadcast {} of {} from root {}", core::dtype_name(dtype), count, root);
    case Collective::allgather: return fmt::format("allgather {} of {}", core::dtype_name(dtype), count);
    case Collective::barrier: return "barrier";
  }
  return "unknown collective";
}

// The fixed-size part of a negotiation record this cycle; the same on every rank. Cache bits go
// either as bit vectors (one bit per cache entry: what a step of hundreds of cached names needs)
// or, while every rank submits only a few names per cycle, as lists of u32 cache indices: a
// small op must not gather two bit vectors of a thousand-entry cache every cycle. Bits that do
// not fit a rank's list go in its payload (kRecordCachedBits), and the lists grow for the next
// cycle.
struct RecordLayout {
  bool listed = false;           // index lists, not bit vectors
  std::size_t bit_bytes = 0;     // one bit vector
  std::size_t slots = 0;         // listed: u32 indices, submitted bits first, then inline bits
  std::size_t inline_bytes = 0;  // the inline data area
  std::size_t inline_bits_at = 0;  // bit vectors: where the inline bits start
  std::size_t inline_data_at = 0;
  std::size_t fixed_bytes = 0;
};

namespace {

enum RecordType : std::uint8_t { kRecordDescription = 1, kRecordStallFailure = 2, kRecordCachedBits = 3 };
// A description's cache byte: which room of the response cache the name takes, if any.
enum CacheRoom : std::uint8_t { kCacheNone = 0, kCacheProgram = 1, kCacheRouted = 2 };
enum Flags : std::uint8_t { kFlagShutdown = 1, kFlagPending = 2 };
// u32 payload bytes, u8 flags, 3 spare, u32 inline bytes this rank would have sent, u32 cache
// indices it would have listed, then (listed records only) u32 submitted bits listed and u32
// inline bits listed.
constexpr std::size_t kFixedHeaderBytes = 24;
constexpr std::size_t kWantedAt = 8;
constexpr std::size_t kIndicesWantedAt = 12;
constexpr std::size_t kListedAt = 16;
constexpr std::size_t kListedInlineAt = 20;
constexpr std::size_t kInlineAlign = 16;      // each inline tensor starts aligned for any dtype
constexpr std::size_t kInlineMaxPending = 16;  // a rank with more pending ops sends no inline data
constexpr std::size_t kMinIndexSlots = 8;
// Stalls are a matter of seconds: rank 0 looks a few times a second, not every cycle.
constexpr std::chrono::milliseconds kStallCheckEvery{50};

std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }

std::uint32_t load_u32(const std::byte* at) {
  std::uint32_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// A cache bit read from a peer's record: one the cache has, or the records are corrupt.
std::size_t checked_bit(std::uint32_t bit, std::size_t cache_entries) {
  if (bit >= cache_entries)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: a negotiation record names cache bit {} of {}", bit, cache_entries));
  return bit;
}

// Calls f(bit) for every set bit of a bit vector of `bits` bits stored in (bits + 7) / 8 bytes,
// in increasing order, a 64-bit word at a time (a step of a thousand cached names is a few
// hundred nanoseconds here, not a lookup per name). skip: words of bits to leave out, or null.
template <typename F>
void for_each_set_bit(const std::byte* vector, std::size_t bits, const std::uint64_t* skip, F&& f) {
  const std::size_t bytes = (bits + 7) / 8;
  for (std::size_t word = 0; word * 64 < bits; ++word) {
    std::uint64_t w = 0;
    std::memcpy(&w, vector + word * 8, std::min<std::size_t>(8, bytes - word * 8));
    if (skip) w &= ~skip[word];
    while (w) {
      f(word * 64 + static_cast<std::size_t>(__builtin_ctzll(w)));
      w &= w - 1;
    }
  }
}

// The inline area of the next cycle's records: every rank computes it from the same records, so
// it is the same everywhere. It grows at once to what a rank wanted (a power of two, so that a
// size seen once keeps fitting) and shrinks by halves once it is four times more than anyone
// wants: one small tensor gathers a few dozen bytes per cycle, not the whole capacity.
std::size_t next_inline_area(std::size_t area, std::size_t wanted, std::size_t capacity) {
  if (wanted > area) {
    std::size_t grown = kInlineAlign;
    while (grown < wanted) grown *= 2;
    return std::min(grown, capacity);
  }
  if (wanted * 4 < area && area > kInlineAlign) return area / 2;
  return area;
}

// A slot count of the listed form follows what the ranks wanted, as the inline area does: at
// once up to a power of two, down by halves once four times more than anyone wants.
std::size_t next_index_slots(std::size_t slots, std::size_t wanted, std::size_t capacity) {
  const std::size_t most = std::max(kMinIndexSlots, capacity);
  if (wanted > slots) {
    std::size_t grown = kMinIndexSlots;
    while (grown < wanted && grown < most) grown *= 2;
    return grown;
  }
  if (wanted * 4 < slots && slots > kMinIndexSlots) return slots / 2;
  return slots;
}

RecordLayout record_layout(std::size_t cache_entries, std::size_t inline_area, std::size_t index_slots) {
  RecordLayout layout;
  layout.bit_bytes = (cache_entries + 7) / 8;
  layout.inline_bytes = cache_entries ? inline_area : 0;
  const std::size_t vectors = layout.inline_bytes ? 2 * layout.bit_bytes : layout.bit_bytes;
  layout.listed = cache_entries && index_slots * sizeof(std::uint32_t) < vectors;
  layout.slots = layout.listed ? index_slots : 0;
  layout.inline_bits_at = kFixedHeaderBytes + layout.bit_bytes;
  const std::size_t end = kFixedHeaderBytes + (layout.listed ? layout.slots * sizeof(std::uint32_t) : vectors);
  // Aligned within the record, and records are whole multiples of kInlineAlign: the reduction
  // reads the data in place from the gathered records.
  layout.inline_data_at = layout.inline_bytes ? round_up(end, kInlineAlign) : end;
  layout.fixed_bytes = layout.inline_data_at + layout.inline_bytes;
  return layout;
}

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

Clock::time_point coarse_now() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec)));
}

void check_argument(bool ok, const std::string& name, const char* why) {
  if (!ok) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("tensor '{}': {}", name, why));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Engine

namespace {

CycleDriver* new_cycle_driver() {
  // Reachable until exit (never destroyed: an engine may shut down in a static destructor).
  static auto* mutex = new std::mutex;
  static auto* drivers = new std::vector<std::unique_ptr<CycleDriver>>;
  std::lock_guard lock(*mutex);
  return drivers->emplace_back(std::make_unique<CycleDriver>()).get();
}

}  // namespace

Engine::Engine(core::Communicator& comm, EngineConfig config)
    : comm_(comm), config_(std::move(config)), rank_(comm.rank()), size_(comm.size()),
      shutdown_seen_(static_cast<std::size_t>(comm.size()), false), driver_(new_cycle_driver()),
      inline_capacity_(config_.inline_bytes / kInlineAlign * kInlineAlign) {
  driver_->engine = this;
  index_slots_ = kMinIndexSlots;
  bit_entries_.reserve(std::min<std::size_t>(config_.cache_capacity, 4096));
  if (rank_ == 0 && !config_.timeline_filename.empty()) timeline_ = std::make_unique<Timeline>(config_.timeline_filename);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

void Engine::throw_pending(const std::string& name) const {
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                     fmt::format("tensor '{}': an op of that name is already pending on rank {}", name, rank_));
}

OpRef Engine::submit(OpRequest request) {
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
  // Not a structured binding: its names are not implicitly moved by `return` (clang refuses the
  // copy; only GCC moves them).
  std::pair<OpRef, OpRef> holds = OpState::create(driver_);  // the engine's, the submitter's
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (broken_code_) throw RuntimeError(broken_code_, fmt::format("tensor '{}': {}", name, broken_message_));
    if (shutdown_requested_ || stopped_)
      throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("tensor '{}': the engine is shut down (ringrun_finalize)", name));
    NameState* node = last_submitted_ ? last_submitted_->next : nullptr;
    if (node && *node->key == name) {
      if (node->pending.load(std::memory_order_acquire)) throw_pending(name);
      node->pending.store(true, std::memory_order_relaxed);
    } else {
      auto [it, created] = local_names_.try_emplace(name, true);
      node = &it->second;
      if (created) {
        node->key = &it->first;
      } else {
        if (node->pending.load(std::memory_order_acquire)) throw_pending(name);
        node->pending.store(true, std::memory_order_relaxed);
      }
      if (last_submitted_) last_submitted_->next = node;
    }
    last_submitted_ = node;
    const std::size_t pending = ++local_names_submitted_ - local_names_completed_.load(std::memory_order_relaxed);
    // Programs that make up new names all the time would otherwise grow the map without bound.
    // (node stays: its flag is set; the others' next links may dangle, so all are dropped.)
    if (local_names_.size() > 4 * pending + 4096) {
      std::erase_if(local_names_, [](auto& kv) { return !kv.second.pending.load(std::memory_order_acquire); });
      for (auto& kv : local_names_) kv.second.next = nullptr;
    }
    // Only the first submission of a batch can need a wake-up (one per step, not one per
    // tensor), and only when the background thread sleeps longer than a batch window: while ops
    // flow it looks every batch window by itself, and a wake-up costs more than a small op. (No
    // clock read here: the thread times the batch from when it first sees it.)
    if (submitted_.empty()) wake = thread_sleeps_long_;
    submitted_.emplace_back(std::move(request), std::move(holds.first), node);  // (a constructor: no zero fill first)
    has_submitted_.store(true, std::memory_order_relaxed);
  }
  if (wake) wake_.notify_one();
  return std::move(holds.second);
}

EngineStats Engine::stats() const {
  auto get = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return EngineStats{get(counters_.cycles),           get(counters_.cached_submissions), get(counters_.described_submissions),
                     get(counters_.fused_allreduces), get(counters_.fused_tensors),      get(counters_.completed),
                     get(counters_.inline_allreduces), get(counters_.cache_evictions), get(counters_.listed_cycles)};
}

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
  }
  wake_.notify_one();
  if (!thread_.joinable()) return;
  thread_.join();
  // No cycle runs any more (the thread left its loop once finished_), and a submission is refused
  // before it touches the tables. A stopped engine may stay allocated (engine_c_api.cpp): what it
  // holds goes now.
  {
    std::lock_guard lock(mutex_);
    local_names_.clear();
    last_submitted_ = nullptr;
  }
  fusion_buffer_ = {};
  mine_ = {};
  all_fixed_ = {};
  all_payload_ = {};
  padded_payload_ = {};
  named_entries_.clear();
  bit_entries_ = std::vector<Entry>();
  bit_shapes_ = {};
  bit_arrival_ = {};
  cache_ = {};
  cache_index_.clear();
  cache_used_ = {};
  cache_hinted_by_ = {};
  routed_cached_ = 0;
  inline_sources_ = {};
}

void Engine::loop() {
  // SCHED_BATCH: same share of the CPU, but a wake-up never preempts the thread running on the
  // core. Ranks are often bound to one core each, shared by the application's threads and this
  // one: a submission's wake-up would otherwise switch the core to this thread and back before
  // the submitter even reaches its wait. (Best effort: nothing depends on it.)
  sched_param batch{};
  (void)::sched_setscheduler(0, SCHED_BATCH, &batch);
  // When this thread last saw the cycle count change (cycles run here or by waiters): what the
  // cycle time and heartbeat count from. Counting cycles costs the cycle no clock read; seeing
  // a change late only postpones this thread's next cycle by one look.
  std::uint64_t seen_cycles = cycles_run_.load(std::memory_order_relaxed);
  Clock::time_point seen_at = Clock::now();
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
        const bool active = active_.load();
        if (const std::uint64_t cycles = cycles_run_.load(std::memory_order_relaxed); cycles != seen_cycles) {
          seen_cycles = cycles;
          seen_at = now;
        }
        Clock::time_point due = seen_at + (active ? Clock::duration(config_.cycle_time) : Clock::duration(config_.idle_heartbeat));
        if (!submitted_.empty() && driver_->waiters.load() == 0) {
          if (!batch_noticed_) {
            batch_noticed_ = true;
            batch_due_ = now + config_.batch_window;
          }
          due = std::min(due, batch_due_);
        }
        if (now >= due) break;
        // While ops flow, look at least every batch window: then submissions need no wake-up.
        const Clock::time_point check =
            active ? std::min(due, now + std::max<Clock::duration>(config_.batch_window, std::chrono::microseconds(100))) : due;
        thread_sleeps_long_ = check - now > config_.batch_window;
        wake_.wait_until(lock, check);
      }
      thread_sleeps_long_ = false;
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
    batch_noticed_ = false;
    has_submitted_.store(false, std::memory_order_relaxed);
  }
  for (auto& op : leftover) {
    std::string message = fmt::format("tensor '{}': the engine stopped before the op was negotiated", op.request.name);
    finish(std::move(op), RINGRUN_ERR_NOT_INITIALIZED, std::move(message));
  }
  {
    std::lock_guard cycle(driver_->mutex);
    hand_over_finished();
    driver_->engine = nullptr;  // waiters stop running cycles: the engine may go away now
  }
  if (timeline_) timeline_->flush();
}

void Engine::waiter_left() {
  // Only this rank's own pending ops need the background thread at once; the heartbeat and
  // cycle time take care of the peers'. (Looked at first without the lock: a submission racing
  // with this decides its own wake-up.)
  if (local_pending_ == 0 && !has_submitted_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard lock(mutex_);
    if (submitted_.empty() && local_pending_ == 0) return;
    waiter_left_ = true;
  }
  wake_.notify_one();
}

void Engine::cycle_once() {
  bool shutdown = false;
  fresh_.clear();
  {
    std::lock_guard lock(mutex_);
    fresh_.swap(submitted_);
    batch_noticed_ = false;
    has_submitted_.store(false, std::memory_order_relaxed);
    shutdown = shutdown_requested_;
  }
  try {
    run_cycle(fresh_, shutdown);
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
    // Ops taken from submitted_ but never sent, if the failure came that early.
    for (auto& op : fresh_) {
      if (!op.state) continue;  // moved into its entry
      std::string why = fmt::format("tensor '{}': {}", op.request.name, message);
      finish(std::move(op), code, std::move(why));
    }
    fail_everything(code, message);
    finished_ = true;
  }
  fresh_.clear();
  hand_over_finished();
  // Stored only when it changes: a seq_cst store is a locked instruction, once per op on the
  // latency path.
  if (const bool active = anyone_active_ || local_pending_ > 0; active_.load(std::memory_order_relaxed) != active)
    active_.store(active);
  cycles_run_.store(cycles_run_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (finished_) {
    {
      std::lock_guard lock(mutex_);
      finished_flag_.store(true);
    }
    wake_.notify_one();  // the background thread leaves its loop (a waiter may have run the last cycle)
  }
}

const std::string& Engine::entry_name(const Entry& entry) const {
  return entry.bit >= 0 ? cache_[static_cast<std::size_t>(entry.bit)].name : *entry.name;
}

std::optional<Engine::Shape>* Engine::shapes(Entry& entry) {
  return entry.bit >= 0 ? bit_shapes_.data() + static_cast<std::size_t>(entry.bit) * static_cast<std::size_t>(size_)
                        : entry.per_rank.data();
}

Clock::time_point* Engine::arrivals(Entry& entry) {
  return entry.bit >= 0 ? bit_arrival_.data() + static_cast<std::size_t>(entry.bit) * static_cast<std::size_t>(size_)
                        : entry.arrival.data();
}

Engine::Entry* Engine::find_entry(const std::string& name) {
  auto cached = cache_index_.find(name);
  if (cached != cache_index_.end()) {
    Entry& entry = bit_entries_[cached->second];
    return entry.present ? &entry : nullptr;
  }
  auto named = named_entries_.find(name);
  return named == named_entries_.end() ? nullptr : &named->second;
}

Engine::Entry& Engine::entry_for_name(const std::string& name, Clock::time_point) {
  // A name the cache holds meets the cache bits other ranks sent for it, even when this rank
  // describes it in full (a changed shape): its entry is the bit's.
  auto cached = cache_index_.find(name);
  if (cached != cache_index_.end()) return bit_entries_[cached->second];
  auto [it, created] = named_entries_.try_emplace(name);
  Entry& entry = it->second;
  if (created) {
    entry.name = &it->first;
    entry.per_rank.resize(static_cast<std::size_t>(size_));
    entry.arrival.resize(static_cast<std::size_t>(size_));
  }
  return entry;
}

void Engine::apply_shape(Entry& entry, int rank, const Shape& shape, Clock::time_point now) {
  if (entry.present == 0) {
    entry.seq = next_entry_seq_++;
    entry.first_seen = now;
    entry.last_warned = now;
    ++pending_entries_;
  }
  auto& slot = shapes(entry)[rank];
  if (slot || entry.uniform) throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: rank {} submitted '{}' twice", rank, entry_name(entry)));
  slot = shape;
  if (timeline_) arrivals(entry)[rank] = now;
  if (++entry.present == size_) ready_.push_back(&entry);
}

void Engine::grow_bit_tables() {
  // One more cache bit: its entry, and room for its inline sources.
  Entry& entry = bit_entries_.emplace_back();
  entry.bit = static_cast<int>(bit_entries_.size() - 1);
  bit_shapes_.resize(bit_entries_.size() * static_cast<std::size_t>(size_));
  if (timeline_) bit_arrival_.resize(bit_entries_.size() * static_cast<std::size_t>(size_));
  inline_sources_.resize(bit_entries_.size() * static_cast<std::size_t>(size_), nullptr);
  inline_ranks_.resize(bit_entries_.size(), 0);
  bit_counts_.resize(bit_entries_.size(), 0);
}

bool Engine::complete_lone_inline(const RecordLayout& layout, std::vector<LocalOp>& fresh) {
  // Which path a rank takes may differ (fresh and the timeline are its own), so this one must
  // leave exactly what the general path leaves: the same counters move, the table is as before.
  if (fresh.size() != 1 || fresh[0].bit < 0 || pending_entries_ != 0 || timeline_ || !layout.inline_bytes) return false;
  if (std::any_of(shutdown_seen_.begin(), shutdown_seen_.end(), [](bool b) { return b; })) return false;
  const auto bit = static_cast<std::size_t>(fresh[0].bit);
  const std::size_t fixed_bytes = layout.fixed_bytes;
  // True when the bit vector at `at` holds `bit` alone.
  auto only_bit = [&](const std::byte* at) {
    for (std::size_t i = 0; i < layout.bit_bytes; ++i)
      if (at[i] != (i == bit / 8 ? static_cast<std::byte>(1u << (bit % 8)) : std::byte{0})) return false;
    return true;
  };
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes;
    if (static_cast<std::uint8_t>(fixed[4]) != kFlagPending) return false;
    if (layout.listed) {
      if (load_u32(fixed + kListedAt) != 1 || load_u32(fixed + kListedInlineAt) != 1 ||
          load_u32(fixed + kFixedHeaderBytes) != bit || load_u32(fixed + kFixedHeaderBytes + sizeof(std::uint32_t)) != bit)
        return false;
    } else if (!only_bit(fixed + kFixedHeaderBytes) || !only_bit(fixed + layout.inline_bits_at)) {
      return false;
    }
  }
  // Every rank sent this op's cache bit and its data, and nothing else: reduce it from the records
  // in rank order, as the transports do.
  LocalOp& op = fresh[0];
  const OpRequest& r = op.request;
  const std::byte* data = all_fixed_.data() + layout.inline_data_at;
  if (size_ == 1) {
    std::memcpy(r.recv, data, r.count * core::dtype_size(r.dtype));
  } else {
    core::reduce(r.recv, data, data + fixed_bytes, r.count, r.dtype, r.op);
    for (int p = 2; p < size_; ++p) core::reduce(r.recv, r.recv, data + static_cast<std::size_t>(p) * fixed_bytes, r.count, r.dtype, r.op);
  }
  if (r.op == RINGRUN_AVERAGE) core::finish_average(r.recv, r.count, r.dtype, size_);
  // What the general path would have changed for good: an entry created and done, a cycle
  // counted, the cache entry used, everyone seen with something pending.
  ++next_entry_seq_;
  ++cycle_number_;
  cache_used_[bit] = cycle_number_;
  anyone_active_ = true;
  counters_.add(counters_.inline_allreduces, 1);
  complete_ok(op);
  return true;
}

Engine::Shape Engine::shape_of(const OpRequest& r) {
  return Shape{r.kind, r.dtype, r.op, r.root, r.count, r.cacheable, r.routed};
}

bool Engine::hint_confirmed(const NameState* node) const {
  const int hint = node->bit_hint;
  return hint >= 0 && static_cast<std::size_t>(hint) < cache_.size() && cache_hinted_by_[static_cast<std::size_t>(hint)] == node;
}

bool Engine::write_lone_record(const RecordLayout& layout, LocalOp& op, Clock::time_point now) {
  // Exactly what run_cycle's general writer puts in the (zeroed) record for this one op, or
  // false to leave it to that writer: builds checked with RINGRUN_CHECKED (the sanitizer
  // builds) compare the two for every op taken here.
  const OpRequest& r = op.request;
  if (r.kind != Collective::allreduce || !r.cacheable || !layout.inline_bytes || local_pending_ != 0) return false;
  if (layout.listed && layout.slots < 2) return false;
  if (rank_ == 0 && now - last_stall_check_ >= kStallCheckEvery) return false;
  const std::size_t bytes = r.count * core::dtype_size(r.dtype);
  const std::size_t padded = round_up(bytes, kInlineAlign);
  if (bytes == 0 || bytes > inline_capacity_ || padded > layout.inline_bytes) return false;
  const int hint = op.name_state->bit_hint;
  if (!hint_confirmed(op.name_state)) return false;
  const auto bit = static_cast<std::size_t>(hint);
  if (cache_[bit].shape != shape_of(r)) return false;
  if (cuda_driver_loaded(now) && core::locate_buffer(r.recv).device) return false;
  op.device = false;
  op.bit = hint;
  std::byte* record = mine_.data();
  if (layout.listed) {
    const auto index = static_cast<std::uint32_t>(bit);
    const std::array<std::uint32_t, 2> counts{1, 1};
    std::memcpy(record + kFixedHeaderBytes, &index, sizeof index);  // submitted
    std::memcpy(record + kFixedHeaderBytes + sizeof index, &index, sizeof index);  // inline
    std::memcpy(record + kListedAt, counts.data(), sizeof counts);
  } else {
    const auto mask = static_cast<std::byte>(1u << (bit % 8));
    record[kFixedHeaderBytes + bit / 8] |= mask;
    record[layout.inline_bits_at + bit / 8] |= mask;
  }
  std::memcpy(record + layout.inline_data_at, r.send, bytes);
  record[4] = static_cast<std::byte>(kFlagPending);
  const auto wanted = static_cast<std::uint32_t>(std::min(padded, inline_capacity_));
  const std::uint32_t indices = 2;  // its submitted bit and its inline bit
  std::memcpy(record + kWantedAt, &wanted, sizeof wanted);
  std::memcpy(record + kIndicesWantedAt, &indices, sizeof indices);
  return true;
}

bool Engine::cuda_driver_loaded(Clock::time_point coarse) {
  if (cuda_loaded_) return true;
  if (coarse == cuda_probed_at_) return false;
  cuda_probed_at_ = coarse;
  cuda_loaded_ = core::cuda_driver_loaded();
  return cuda_loaded_;
}

void Engine::run_cycle(std::vector<LocalOp>& fresh, bool shutdown) {
  // What the cycle stamps (first seen, stall checks) counts in seconds: the coarse clock (a few
  // milliseconds, a quarter of the cost of a precise read here) unless the timeline wants
  // microseconds. Both count from the same origin as steady_clock.
  const auto now = timeline_ ? Clock::now() : coarse_now();
  // One bit per cache entry in use (the same number on every rank: the cache changes only after
  // a cycle's agreement), so the record stays small until the cache fills.
  // Then a second bit vector (or list) and an area of inline data: small cached allreduces pending
  // here ride along (see below). Only once the cache has entries, so the first cycles stay tiny.
  const std::size_t cache_entries = cache_.size();
  const RecordLayout layout = record_layout(cache_entries, inline_area_, index_slots_);
  const std::size_t bit_bytes = layout.bit_bytes;
  const std::size_t inline_bytes = layout.inline_bytes;
  const std::size_t inline_data_at = layout.inline_data_at;
  const std::size_t fixed_bytes = layout.fixed_bytes;

  // This rank's record: cache bits for names the cache knows as submitted, full descriptions for
  // the rest, and (rank 0) the stall shutdowns it decided.
  mine_.assign(fixed_bytes, std::byte{0});
  Writer payload;
  std::size_t cached_count = 0;
  auto write_record = [&] {
    listed_bits_.clear();
    const bool cuda = !fresh.empty() && cuda_driver_loaded(timeline_ ? coarse_now() : now);
    for (auto& op : fresh) {
      const OpRequest& r = op.request;
      const Shape shape = shape_of(r);
      int& hint = op.name_state->bit_hint;
      if (!hint_confirmed(op.name_state)) {
        auto cached = cache_index_.find(r.name);
        hint = cached == cache_index_.end() ? -1 : static_cast<int>(cached->second);
        if (hint >= 0) cache_hinted_by_[static_cast<std::size_t>(hint)] = op.name_state;
      }
      const int bit = hint;
      if (bit >= 0 && cache_[static_cast<std::size_t>(bit)].shape == shape) {
        if (layout.listed) listed_bits_.push_back(static_cast<std::uint32_t>(bit));
        else mine_[kFixedHeaderBytes + static_cast<std::size_t>(bit) / 8] |= static_cast<std::byte>(1u << (bit % 8));
        ++cached_count;
      } else {
        payload.u8(kRecordDescription);
        payload.str(r.name);
        payload.u8(static_cast<std::uint8_t>(shape.kind));
        payload.u8(static_cast<std::uint8_t>(shape.dtype));
        payload.u8(static_cast<std::uint8_t>(shape.op));
        payload.u8(shape.cacheable ? (shape.routed ? kCacheRouted : kCacheProgram) : kCacheNone);
        payload.u32(static_cast<std::uint32_t>(shape.root));
        payload.u64(shape.count);
      }
      op.device = cuda && r.kind == Collective::allreduce && core::locate_buffer(r.recv).device;
      op.bit = bit;
    }
    // Listed: as many submitted bits as there are slots; the rest in the payload.
    const std::size_t listed = std::min(listed_bits_.size(), layout.slots);
    for (std::size_t i = 0; i < listed; ++i)
      std::memcpy(mine_.data() + kFixedHeaderBytes + i * sizeof(std::uint32_t), &listed_bits_[i], sizeof(std::uint32_t));
    if (listed < listed_bits_.size()) {
      payload.u8(kRecordCachedBits);
      payload.u32(static_cast<std::uint32_t>(listed_bits_.size() - listed));
      for (std::size_t i = listed; i < listed_bits_.size(); ++i) payload.u32(listed_bits_[i]);
    }
    // Inline data: every small allreduce pending here whose name the cache holds as described puts
    // its input in the record, in cache-bit order, each padded to kInlineAlign. When an op becomes
    // ready in a cycle whose records carry it from every rank, each rank reduces it from the records
    // in rank order: one synchronisation per op instead of two (negotiation, then the allreduce).
    // Only a handful of pending ops: with many, they fuse anyway, and scanning them every cycle costs.
    std::size_t listed_inline = 0;
    std::size_t wanted = 0;
    std::size_t wanted_indices = cached_count;
    if (inline_capacity_ && cache_entries && local_pending_ + fresh.size() <= kInlineMaxPending) {
      auto& candidates = inline_candidates_;
      candidates.clear();
      auto consider = [&](int bit, const LocalOp& op) {
        if (bit < 0 || op.device) return;
        const OpRequest& r = op.request;
        const std::size_t bytes = r.count * core::dtype_size(r.dtype);
        if (r.kind != Collective::allreduce || !r.cacheable || bytes == 0 || bytes > inline_capacity_) return;
        const Shape& cached = cache_[static_cast<std::size_t>(bit)].shape;
        if (cached.kind != r.kind || cached.dtype != r.dtype || cached.op != r.op || cached.count != r.count) return;
        candidates.emplace_back(bit, &op);
      };
      for (const auto& op : fresh) consider(op.bit, op);
      for (int bit : local_bits_) consider(bit, *bit_entries_[static_cast<std::size_t>(bit)].local);
      std::sort(candidates.begin(), candidates.end(), [](auto& a, auto& b) { return a.first < b.first; });
      wanted_indices += candidates.size();
      std::size_t used = 0;
      for (auto& [bit, op] : candidates) {
        const OpRequest& r = op->request;
        const std::size_t bytes = r.count * core::dtype_size(r.dtype);
        const std::size_t padded = round_up(bytes, kInlineAlign);
        wanted += padded;
        if (used + padded > inline_bytes) continue;
        if (layout.listed) {
          if (listed + listed_inline == layout.slots) continue;
          const auto index = static_cast<std::uint32_t>(bit);
          std::memcpy(mine_.data() + kFixedHeaderBytes + (listed + listed_inline++) * sizeof index, &index, sizeof index);
        } else {
          mine_[layout.inline_bits_at + static_cast<std::size_t>(bit) / 8] |= static_cast<std::byte>(1u << (bit % 8));
        }
        std::memcpy(mine_.data() + inline_data_at + used, r.send, bytes);
        used += padded;
      }
    }
    std::vector<std::pair<std::string, std::string>> stall_failures;
    if (rank_ == 0 && now - last_stall_check_ >= kStallCheckEvery) {
      last_stall_check_ = now;
      check_stalls(now, stall_failures);
    }
    for (auto& [name, message] : stall_failures) {
      payload.u8(kRecordStallFailure);
      payload.str(name);
      payload.str(message);
    }
    const std::uint32_t payload_bytes = static_cast<std::uint32_t>(payload.bytes().size());
    std::memcpy(mine_.data(), &payload_bytes, sizeof payload_bytes);
    std::uint8_t flags = (shutdown ? kFlagShutdown : 0) | (local_pending_ + fresh.size() ? kFlagPending : 0);
    mine_[4] = static_cast<std::byte>(flags);
    const std::uint32_t wanted_bytes = static_cast<std::uint32_t>(std::min(wanted, inline_capacity_));
    std::memcpy(mine_.data() + kWantedAt, &wanted_bytes, sizeof wanted_bytes);
    const auto indices = static_cast<std::uint32_t>(std::min<std::size_t>(wanted_indices, UINT32_MAX));
    std::memcpy(mine_.data() + kIndicesWantedAt, &indices, sizeof indices);
    if (layout.listed) {
      const auto counts = std::array{static_cast<std::uint32_t>(listed), static_cast<std::uint32_t>(listed_inline)};
      std::memcpy(mine_.data() + kListedAt, counts.data(), sizeof counts);
    }
  };
  // The common case of a latency-bound program, one cached small allreduce and nothing else
  // pending: the same record, written directly (a lone op's time is mostly bookkeeping).
  if (fresh.size() == 1 && !shutdown && !timeline_ && write_lone_record(layout, fresh[0], now)) {
    cached_count = 1;
#ifdef RINGRUN_CHECKED
    const std::vector<std::byte> direct = mine_;
    mine_.assign(fixed_bytes, std::byte{0});
    cached_count = 0;
    write_record();
    if (mine_ != direct || !payload.bytes().empty() || cached_count != 1)
      throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: tensor '{}': the lone op's record differs from "
                                                           "the general one",
                                                           fresh[0].request.name));
#endif
  } else {
    write_record();
  }
  all_fixed_.resize(fixed_bytes * static_cast<std::size_t>(size_));
  comm_.allgather_host(mine_.data(), fixed_bytes, RINGRUN_UINT8, all_fixed_.data());
  {
    counters_.add(counters_.cycles, 1);
    if (layout.listed) counters_.add(counters_.listed_cycles, 1);
    counters_.add(counters_.described_submissions, fresh.size() - cached_count);
    counters_.add(counters_.cached_submissions, cached_count);
  }

  std::size_t max_payload = 0;
  std::size_t max_wanted = 0;
  std::size_t max_indices = 0;
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes;
    max_payload = std::max<std::size_t>(max_payload, load_u32(fixed));
    max_wanted = std::max<std::size_t>(max_wanted, load_u32(fixed + kWantedAt));
    max_indices = std::max<std::size_t>(max_indices, load_u32(fixed + kIndicesWantedAt));
    if (layout.listed && (load_u32(fixed + kListedAt) > layout.slots ||
                          load_u32(fixed + kListedInlineAt) > layout.slots - load_u32(fixed + kListedAt)))
      throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: rank {}'s negotiation record lists more than {} cache bits", r, layout.slots));
  }
  inline_area_ = next_inline_area(inline_area_, max_wanted, inline_capacity_);
  index_slots_ = next_index_slots(index_slots_, max_indices, config_.cache_capacity + kRoutedCacheEntries);
  if (max_payload > 0) {
    padded_payload_.assign(max_payload, std::byte{0});
    std::copy(payload.bytes().begin(), payload.bytes().end(), padded_payload_.begin());
    all_payload_.resize(max_payload * static_cast<std::size_t>(size_));
    comm_.allgather_host(padded_payload_.data(), max_payload, RINGRUN_UINT8, all_payload_.data());
  }
  if (max_payload == 0 && complete_lone_inline(layout, fresh)) return;

  // Apply every rank's record, in rank order: every rank builds the same table.
  anyone_active_ = false;
  ready_.clear();
  std::vector<std::pair<std::string, std::string>> agreed_stall_failures;
  // First the names every rank sent as a cache bit in this very cycle (the steady state: the
  // same step everywhere): ready at once, one pass per name instead of one per rank and name.
  // Then everything else rank by rank. Both orders are the same on every rank.
  const std::size_t words = (cache_entries + 63) / 64;
  // Calls f(bit) for each cache bit a rank's record holds: what it submitted (inline false) or
  // sent inline data for, in the order of the record, bits set in skip left out.
  auto for_each_bit_in = [&](const std::byte* fixed, bool inline_bits, const std::uint64_t* skip, auto&& f) {
    if (!layout.listed) {
      for_each_set_bit(fixed + (inline_bits ? layout.inline_bits_at : kFixedHeaderBytes), cache_entries, skip, f);
      return;
    }
    const std::uint32_t submitted = load_u32(fixed + kListedAt);
    const std::uint32_t count = inline_bits ? load_u32(fixed + kListedInlineAt) : submitted;
    const std::byte* list = fixed + kFixedHeaderBytes + (inline_bits ? submitted : 0) * sizeof(std::uint32_t);
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::size_t bit = checked_bit(load_u32(list + i * sizeof(std::uint32_t)), cache_entries);
      if (skip && (skip[bit / 64] >> (bit % 64) & 1)) continue;
      f(bit);
    }
  };
  everyone_bits_.assign(words, 0);
  if (size_ > 1 && cache_entries) {
    if (!layout.listed) {
      for (std::size_t word = 0; word < words; ++word) {
        std::uint64_t all = ~std::uint64_t{0};
        for (int r = 0; r < size_ && all; ++r) {
          std::uint64_t w = 0;
          std::memcpy(&w, all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes + kFixedHeaderBytes + word * 8,
                      std::min<std::size_t>(8, bit_bytes - word * 8));
          all &= w;
        }
        everyone_bits_[word] = all;
      }
    } else {
      // A bit every rank listed: counted, then the counts cleared (only the listed ones).
      for (int pass = 0; pass < 2; ++pass)
        for (int r = 0; r < size_; ++r)
          for_each_bit_in(all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes, false, nullptr, [&](std::size_t bit) {
            if (pass == 1) bit_counts_[bit] = 0;
            else if (++bit_counts_[bit] == size_) everyone_bits_[bit / 64] |= std::uint64_t{1} << (bit % 64);
          });
    }
    for_each_set_bit(reinterpret_cast<const std::byte*>(everyone_bits_.data()), cache_entries, nullptr, [&](std::size_t bit) {
      Entry& entry = bit_entries_[bit];
      // Present already means a rank submitted the name twice: the per-rank pass reports it.
      if (entry.present) {
        everyone_bits_[bit / 64] &= ~(std::uint64_t{1} << (bit % 64));
        return;
      }
      entry.seq = next_entry_seq_++;
      entry.first_seen = entry.last_warned = now;
      ++pending_entries_;
      entry.uniform = true;  // every rank: the cached shape (no per-rank copies to fill and compare)
      if (timeline_) std::fill_n(arrivals(entry), size_, now);
      entry.present = size_;
      ready_.push_back(&entry);
    });
  }
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes;
    std::uint32_t bytes;
    std::memcpy(&bytes, fixed, sizeof bytes);
    auto peer_flags = static_cast<std::uint8_t>(fixed[4]);
    if (peer_flags & kFlagShutdown) shutdown_seen_[static_cast<std::size_t>(r)] = true;
    if (peer_flags & (kFlagShutdown | kFlagPending)) anyone_active_ = true;
    for_each_bit_in(fixed, false, everyone_bits_.data(),
                    [&](std::size_t bit) { apply_shape(bit_entries_[bit], r, cache_[bit].shape, now); });
    if (inline_bytes) {
      std::size_t used = 0;
      for_each_bit_in(fixed, true, nullptr, [&](std::size_t bit) {
        const Shape& d = cache_[bit].shape;
        const std::size_t padded = round_up(d.count * core::dtype_size(d.dtype), kInlineAlign);
        if (used + padded > inline_bytes) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: inline data overflows its record");
        inline_sources_[bit * static_cast<std::size_t>(size_) + static_cast<std::size_t>(r)] = fixed + inline_data_at + used;
        if (inline_ranks_[bit]++ == 0) inline_touched_.push_back(static_cast<int>(bit));
        used += padded;
      });
    }
    if (max_payload == 0) continue;
    Reader reader(all_payload_.data() + static_cast<std::size_t>(r) * max_payload, bytes);
    while (reader.more()) {
      auto type = reader.u8();
      if (type == kRecordDescription) {
        std::string name = reader.str();
        Shape d;
        d.kind = static_cast<Collective>(reader.u8());
        d.dtype = static_cast<ringrun_dtype>(reader.u8());
        d.op = static_cast<ringrun_op>(reader.u8());
        const std::uint8_t cache_room = reader.u8();
        if (cache_room > kCacheRouted) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: unknown cache room in a negotiation record");
        d.cacheable = cache_room != kCacheNone;
        d.routed = cache_room == kCacheRouted;
        d.root = static_cast<std::int32_t>(reader.u32());
        d.count = reader.u64();
        apply_shape(entry_for_name(name, now), r, d, now);
      } else if (type == kRecordCachedBits) {
        // Cache bits that did not fit this rank's list.
        for (std::uint32_t n = reader.u32(); n > 0; --n) {
          const std::size_t bit = checked_bit(reader.u32(), cache_entries);
          apply_shape(bit_entries_[bit], r, cache_[bit].shape, now);
        }
      } else if (type == kRecordStallFailure) {
        std::string name = reader.str();
        std::string message = reader.str();
        agreed_stall_failures.emplace_back(std::move(name), std::move(message));
      } else {
        throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: unknown negotiation record");
      }
    }
  }
  // This rank's ops join the entries its own record just created or joined.
  for (auto& op : fresh) {
    Entry& entry = op.bit >= 0 ? bit_entries_[static_cast<std::size_t>(op.bit)] : named_entries_.at(op.request.name);
    if (entry.bit >= 0) {
      entry.local_at = local_bits_.size();
      local_bits_.push_back(entry.bit);
    }
    entry.local.emplace(std::move(op));
    ++local_pending_;
  }
  if (pending_entries_) anyone_active_ = true;

  for (auto& [name, message] : agreed_stall_failures) {
    if (Entry* entry = find_entry(name)) {
      std::erase(ready_, entry);  // it may have become ready in this very cycle
      fail_entry(*entry, RINGRUN_ERR_TIMEOUT, message);
    }
  }

  if (std::any_of(shutdown_seen_.begin(), shutdown_seen_.end(), [](bool b) { return b; })) {
    std::vector<int> finalizing;
    for (int r = 0; r < size_; ++r)
      if (shutdown_seen_[static_cast<std::size_t>(r)]) finalizing.push_back(r);
    fail_everything(RINGRUN_ERR_NOT_INITIALIZED,
                    fmt::format("ringrun_finalize() was called on {} while the op was pending", join_ranks(finalizing)));
  } else {
    ++cycle_number_;
    if (timeline_ && config_.timeline_mark_cycles && pending_entries_) timeline_->mark(fmt::format("cycle {}", cycle_number_), now);
    // Usually in order already (a step's names applied in bit order as they were created).
    auto by_seq = [](const Entry* a, const Entry* b) { return a->seq < b->seq; };
    if (!std::is_sorted(ready_.begin(), ready_.end(), by_seq)) std::sort(ready_.begin(), ready_.end(), by_seq);
    cache_inserts_.clear();
    if (!ready_.empty()) execute(ready_);
  }
  ready_.clear();
  // Only now, with no Entry pointer held, may bit_entries_ grow.
  for (auto& description : cache_inserts_) insert_into_cache(std::move(description));
  cache_inserts_.clear();
  // The inline sources point into this cycle's records.
  for (int bit : inline_touched_) {
    inline_ranks_[static_cast<std::size_t>(bit)] = 0;
    std::fill_n(inline_sources_.begin() + static_cast<std::ptrdiff_t>(bit) * size_, size_, nullptr);
  }
  inline_touched_.clear();
  if (timeline_) timeline_->flush();
}

void Engine::check_stall(Entry& entry, Clock::time_point now, std::vector<std::pair<std::string, std::string>>& to_fail) {
  if (entry.present == 0 || entry.present == size_) return;
  const bool warn = config_.stall_warning.count() > 0;
  const bool stop = config_.stall_shutdown.count() > 0;
  const auto age = now - entry.first_seen;
  const bool shut = stop && age >= config_.stall_shutdown;
  const bool warn_now = warn && age >= config_.stall_warning &&
                        (now - entry.last_warned >= config_.stall_warning || entry.last_warned == entry.first_seen);
  if (!shut && !warn_now) return;
  const std::string& name = entry_name(entry);
  std::vector<int> submitted;
  std::string missing;
  std::string what;
  for (int r = 0; r < size_; ++r) {
    const auto& d = shapes(entry)[r];
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

void Engine::check_stalls(Clock::time_point now, std::vector<std::pair<std::string, std::string>>& to_fail) {
  if (config_.stall_warning.count() <= 0 && config_.stall_shutdown.count() <= 0) return;
  if (pending_entries_ == 0) return;
  for (Entry& entry : bit_entries_) check_stall(entry, now, to_fail);
  for (auto& [name, entry] : named_entries_) check_stall(entry, now, to_fail);
}

void Engine::finish(LocalOp op, int code, std::string message) {
  finished_ops_.push_back(Finished{std::move(op.state), op.name_state, code, std::move(message)});
}

void Engine::complete_ok(LocalOp& op) {
  // The name is free again before the op is done: a thread that sees it done may resubmit it.
  op.name_state->pending.store(false, std::memory_order_release);
  // Done, with no fence and no wake-up: nobody sleeps on it. While the engine runs, a waiter
  // looks at done_ only under driver_->mutex, which this cycle holds; it sleeps on done_ only
  // once it has seen the engine finished (OpState::wait), and no cycle runs after that. (Ops
  // failed at the very end go through complete(), which does wake sleepers.)
  op.state->complete_quietly(RINGRUN_OK, std::string());
  op.state.reset();
  ++completed_ok_;
}

void Engine::hand_over_finished() {
  for (auto& f : finished_ops_) {
    f.name_state->pending.store(false, std::memory_order_release);
    f.state->complete(f.code, std::move(f.message));
  }
  const std::size_t completed = completed_ok_ + finished_ops_.size();
  if (completed) {
    local_names_completed_.store(local_names_completed_.load(std::memory_order_relaxed) + completed, std::memory_order_relaxed);
    counters_.add(counters_.completed, completed);
  }
  completed_ok_ = 0;
  finished_ops_.clear();
}

void Engine::reset_entry(Entry& entry) {
  if (entry.local) {
    entry.local.reset();
    --local_pending_;
    if (entry.bit >= 0) {
      // Swap-remove from local_bits_, keeping the moved bit's position right.
      const int last = local_bits_.back();
      local_bits_[entry.local_at] = last;
      bit_entries_[static_cast<std::size_t>(last)].local_at = entry.local_at;
      local_bits_.pop_back();
    }
  }
  if (entry.present) --pending_entries_;
  if (entry.bit >= 0) {
    entry.present = 0;
    if (!entry.uniform) std::fill_n(shapes(entry), size_, std::nullopt);
    entry.uniform = false;
  } else {
    named_entries_.erase(named_entries_.find(*entry.name));  // entry is gone from here on
  }
}

void Engine::fail_entry(Entry& entry, int code, const std::string& message) {
  if (entry.local) {
    const std::string& name = entry_name(entry);
    finish(std::move(*entry.local), code, message.rfind("tensor '", 0) == 0 ? message : fmt::format("tensor '{}': {}", name, message));
  }
  reset_entry(entry);
}

void Engine::fail_everything(int code, const std::string& message) {
  for (Entry& entry : bit_entries_)
    if (entry.present || entry.local) fail_entry(entry, code, message);
  std::vector<Entry*> named;
  for (auto& [name, entry] : named_entries_) named.push_back(&entry);
  for (Entry* entry : named) fail_entry(*entry, code, message);
}

void Engine::update_cache(Entry& entry, const Shape& shape) {
  if (entry.bit >= 0) {
    const auto bit = static_cast<std::size_t>(entry.bit);
    // A changed shape was described in full by every rank that changed it. (Compared first: in
    // the steady state nothing changes, and the cache line stays clean.)
    if (!(cache_[bit].shape == shape)) {
      // (A program that names an async op like a routed call moves the entry between rooms.)
      if (cache_[bit].shape.routed != shape.routed) routed_cached_ = shape.routed ? routed_cached_ + 1 : routed_cached_ - 1;
      cache_[bit].shape = shape;
    }
    cache_used_[bit] = cycle_number_;
    return;
  }
  if (!shape.cacheable || config_.cache_capacity == 0) return;
  cache_inserts_.push_back(Description{*entry.name, shape});  // after the cycle's ops: see bit_entries_
}

void Engine::insert_into_cache(Description description) {
  const std::string& name = description.name;
  const Shape& shape = description.shape;
  // Two rooms: the program's names (cache_capacity) and the routed synchronous calls'
  // (kRoutedCacheEntries); a name only ever displaces one of its own room.
  if (shape.routed ? routed_cached_ < kRoutedCacheEntries : cache_.size() - routed_cached_ < config_.cache_capacity) {
    cache_index_.emplace(name, cache_.size());
    cache_.push_back(Description{name, shape});
    cache_used_.push_back(cycle_number_);
    cache_hinted_by_.push_back(nullptr);
    if (shape.routed) ++routed_cached_;
    grow_bit_tables();
    return;
  }
  // Full: the least recently used entry of the room (the lowest bit among equals) makes room, as
  // in Horovod's response cache; never one whose name is pending (its bits already went out).
  // Every rank completes the same ops in the same cycles, so every rank evicts the same entry and
  // the bits keep their meaning everywhere.
  std::size_t victim = cache_.size();
  for (std::size_t bit = 0; bit < cache_.size(); ++bit)
    if (cache_[bit].shape.routed == shape.routed && bit_entries_[bit].present == 0 &&
        (victim == cache_.size() || cache_used_[bit] < cache_used_[victim]))
      victim = bit;
  if (victim == cache_.size()) return;
  cache_index_.erase(cache_[victim].name);
  cache_index_.emplace(name, victim);
  cache_[victim] = std::move(description);
  cache_used_[victim] = cycle_number_;
  cache_hinted_by_[victim] = nullptr;
  counters_.add(counters_.cache_evictions, 1);
}

void Engine::finish_ok(Entry& entry) {
  update_cache(entry, entry.uniform ? cache_[static_cast<std::size_t>(entry.bit)].shape : *shapes(entry)[0]);
  if (entry.local) complete_ok(*entry.local);
  reset_entry(entry);
}

void Engine::execute(std::vector<Entry*>& ready) {
  // Clock reads cost about as much as a small op's bookkeeping here: only the timeline needs them.
  const auto now = timeline_ ? Clock::now() : Clock::time_point{};
  for (Entry*& entry : ready) {
    const std::optional<Shape>* submitted = shapes(*entry);
    const bool same = entry->uniform || std::all_of(submitted, submitted + size_, [&](const auto& d) { return *d == *submitted[0]; });
    if (timeline_) {
      const std::string& name = entry_name(*entry);
      for (int r = 0; r < size_; ++r)
        timeline_->tick(name, fmt::format("rank {} ready", r), arrivals(*entry)[r]);
      timeline_->span(name, "NEGOTIATE", entry->first_seen, now);
    }
    if (!same || !entry->local) {
      // Group the ranks by what they submitted: every rank gets the same message.
      const std::string name = entry_name(*entry);
      std::vector<std::pair<std::string, std::vector<int>>> groups;
      for (int r = 0; r < size_; ++r) {
        std::string what = submitted[r]->describe();
        auto g = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == what; });
        if (g == groups.end()) groups.push_back({what, {r}});
        else g->second.push_back(r);
      }
      std::string detail;
      for (auto& [what, ranks] : groups) detail += (detail.empty() ? "" : "; ") + join_ranks(ranks) + ": " + what;
      fail_entry(*entry, RINGRUN_ERR_MISMATCH, fmt::format("tensor '{}': ranks disagree: {}", name, detail));
      entry = nullptr;
    }
  }
  std::erase(ready, nullptr);

  // Small allreduces every rank sent inline: reduced from the records.
  for (Entry*& entry : ready) {
    if (entry->bit < 0 || inline_ranks_[static_cast<std::size_t>(entry->bit)] != size_) continue;
    const OpRequest& r = entry->local->request;
    if (r.kind != Collective::allreduce) continue;
    const std::byte* const* sources = inline_sources_.data() + static_cast<std::size_t>(entry->bit) * static_cast<std::size_t>(size_);
    const auto start = timeline_ ? Clock::now() : Clock::time_point{};
    // Rank order, as the transports do: every rank computes the same bits.
    if (size_ == 1) {
      std::memcpy(r.recv, sources[0], r.count * core::dtype_size(r.dtype));
    } else {
      core::reduce(r.recv, sources[0], sources[1], r.count, r.dtype, r.op);
      for (int p = 2; p < size_; ++p) core::reduce(r.recv, r.recv, sources[p], r.count, r.dtype, r.op);
    }
    if (r.op == RINGRUN_AVERAGE) core::finish_average(r.recv, r.count, r.dtype, size_);
    if (timeline_) timeline_->span(r.name, "ALLREDUCE", start, Clock::now());
    counters_.add(counters_.inline_allreduces, 1);
    finish_ok(*entry);
    entry = nullptr;
  }
  std::erase(ready, nullptr);

  // Allreduces grouped by (dtype, op) in order of first appearance, then packed up to the
  // fusion threshold; everything else one by one after them. The same on every rank.
  std::vector<std::vector<Entry*>> groups;
  std::vector<Entry*> others;
  for (Entry* entry : ready) {
    // Device buffers go to NCCL one by one: the fusion buffer is host memory and is filled with
    // memcpy. Programs keep a tensor on the same kind of memory on every rank, so every rank
    // still forms the same groups.
    // A large tensor also runs alone, on its own buffers: copying it into the fusion buffer and
    // back costs two passes over it, far more than the one synchronisation fusion would save.
    const LocalOp& op = *entry->local;
    const std::size_t bytes = op.request.count * core::dtype_size(op.request.dtype);
    const bool compress = config_.fp16_compression && op.request.dtype == RINGRUN_FLOAT32;
    if (op.request.kind != Collective::allreduce || op.device || (bytes >= config_.unfused_min_bytes && !compress)) {
      others.push_back(entry);
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& group) {
      const OpRequest& head = group[0]->local->request;
      return head.dtype == op.request.dtype && head.op == op.request.op;
    });
    if (g == groups.end()) groups.push_back({entry});
    else g->push_back(entry);
  }
  for (auto& group : groups) {
    std::vector<Entry*> chunk;
    std::size_t chunk_bytes = 0;
    auto flush_chunk = [&] {
      if (chunk.empty()) return;
      execute_allreduce_group(chunk, now);
      for (Entry* entry : chunk) finish_ok(*entry);
      chunk.clear();
      chunk_bytes = 0;
    };
    for (Entry* entry : group) {
      const OpRequest& r = entry->local->request;
      std::size_t bytes = r.count * core::dtype_size(r.dtype);
      if (!chunk.empty() && chunk_bytes + bytes > config_.fusion_threshold_bytes) flush_chunk();
      chunk.push_back(entry);
      chunk_bytes += bytes;
    }
    flush_chunk();
  }
  for (Entry* entry : others) {
    execute_single(*entry, now);
    finish_ok(*entry);
  }
}

void Engine::execute_allreduce_group(const std::vector<Entry*>& group, Clock::time_point ready_at) {
  const OpRequest& first = group[0]->local->request;
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
  if (!compress) {
    // Tensors adjacent in memory, in both send and recv, are one span: gradients that are views
    // of one flat buffer (as several frameworks allocate them) make a plain allreduce, with no
    // per-tensor work in the transport. Ranks may merge differently: the element order, and so
    // the collective, is the same.
    spans_.clear();
    const std::size_t esize = core::dtype_size(first.dtype);
    for (Entry* entry : group) {
      const OpRequest& r = entry->local->request;
      const std::size_t bytes = r.count * esize;
      if (bytes == 0) continue;
      if (!spans_.empty()) {
        core::BufferSpan& last = spans_.back();
        if (static_cast<const std::byte*>(last.send) + last.bytes == r.send &&
            static_cast<std::byte*>(last.recv) + last.bytes == r.recv) {
          last.bytes += bytes;
          continue;
        }
      }
      spans_.push_back({r.send, r.recv, bytes});
    }
    if (spans_.size() <= 1 || comm_.can_allreduce_scattered()) {
      const auto start = timeline_ ? Clock::now() : Clock::time_point{};
      // The transport reads every tensor in place and writes every result in place: no copies
      // into a fusion buffer and back, which cost as much as the allreduce itself.
      if (spans_.empty()) comm_.allreduce(nullptr, nullptr, 0, first.dtype, first.op);  // empty tensors only
      else if (spans_.size() == 1) comm_.allreduce(spans_[0].send, spans_[0].recv, spans_[0].bytes / esize, first.dtype, first.op);
      else comm_.allreduce_scattered(spans_, first.dtype, first.op);
      counters_.add(counters_.fused_allreduces, 1);
      counters_.add(counters_.fused_tensors, group.size());
      if (timeline_) {
        const auto end = Clock::now();
        for (Entry* entry : group) {
          timeline_->span(entry->local->request.name, "QUEUE", ready_at, start);
          timeline_->span(entry->local->request.name, "ALLREDUCE", start, end);
        }
      }
      return;
    }
  }
  const ringrun_dtype wire = compress ? RINGRUN_FLOAT16 : first.dtype;
  const std::size_t wire_element = core::dtype_size(wire);
  std::size_t total = 0;
  for (Entry* entry : group) total += entry->local->request.count;
  if (fusion_buffer_.size() < total * wire_element) fusion_buffer_.resize(total * wire_element);
  std::byte* buffer = fusion_buffer_.data();

  const auto copy_in_start = Clock::now();
  std::size_t offset = 0;
  for (Entry* entry : group) {
    const OpRequest& r = entry->local->request;
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
  counters_.add(counters_.fused_allreduces, 1);
  counters_.add(counters_.fused_tensors, group.size());
  const auto copy_out_start = Clock::now();
  offset = 0;
  for (Entry* entry : group) {
    const OpRequest& r = entry->local->request;
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
    for (Entry* entry : group) {
      const std::string& name = entry->local->request.name;
      timeline_->span(name, "QUEUE", ready_at, copy_in_start);
      timeline_->span(name, "MEMCPY_IN_FUSION_BUFFER", copy_in_start, reduce_start);
      timeline_->span(name, "ALLREDUCE", reduce_start, copy_out_start);
      timeline_->span(name, "MEMCPY_OUT_FUSION_BUFFER", copy_out_start, end);
    }
  }
}

void Engine::execute_single(Entry& entry, Clock::time_point ready_at) {
  const OpRequest& r = entry.local->request;
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
