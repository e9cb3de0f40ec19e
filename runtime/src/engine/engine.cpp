// The engine's lifecycle (engine.hpp): configuration, start, submission, the background thread's
// loop, one cycle's error handling, stop and release. What a cycle does is in cycle.cpp.
//
// Owns: the submission side (mutex_, submitted_, local_names_), the thread and its wake-ups, the
// broken and stopped states. Touches the cycle's state only under driver_->mutex, through
// cycle_once().
#include "engine/engine.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "core/adasum.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "engine/timeline.hpp"
#include "ringrun/runtime.hpp"
#include "core/device_memory.hpp"

namespace ringrun::engine {

using core::Collective;

EngineConfig EngineConfig::from_environment() {
  namespace v = variables;
  EngineConfig config;
  // Decimal numbers: the launcher passes --fusion-threshold-mb 0.5 and kin as given.
  config.fusion_threshold_bytes = static_cast<std::size_t>(*core::env_number(v::kFusionThresholdMb) * (1 << 20));
  config.cycle_time = std::chrono::microseconds(static_cast<long long>(*core::env_number(v::kCycleTimeMs) * 1000));
  config.timeline_filename = core::env_text(v::kTimelineFilename).value_or("");
  config.stall_warning =
      std::chrono::milliseconds(static_cast<long long>(*core::env_number(v::kStallCheckWarningTimeSeconds) * 1000));
  config.stall_shutdown =
      std::chrono::milliseconds(static_cast<long long>(*core::env_number(v::kStallCheckShutdownTimeSeconds) * 1000));
  config.cache_capacity = static_cast<std::size_t>(*core::env_integer(v::kCacheCapacity));
  config.fp16_compression = *core::env_flag(v::kFp16Compression);
  config.inline_bytes = static_cast<std::size_t>(*core::env_integer(v::kInlineBytes));
  config.timeline_mark_cycles = *core::env_flag(v::kTimelineMarkCycles);
  config.unfused_min_bytes = static_cast<std::size_t>(*core::env_integer(v::kUnfusedMinBytes));
  apply_horovod_environment(config);
  return config;
}

void EngineConfig::apply_horovod_environment(EngineConfig& config) {
  // Horovod's own knobs, in Horovod's units, where a migrated job's environment still sets them
  // and ringrun's option for the same knob was not given (ringrun's wins: README, "Coming from
  // Horovod").
  namespace v = variables;
  auto unset = [](const v::Variable& ours) { return !core::env_set(ours); };
  if (unset(v::kFusionThresholdMb))
    if (auto bytes = core::env_integer(v::kHorovodFusionThreshold))
      config.fusion_threshold_bytes = static_cast<std::size_t>(*bytes);
  if (unset(v::kCycleTimeMs))
    if (auto ms = core::env_number(v::kHorovodCycleTime))
      config.cycle_time = std::chrono::microseconds(static_cast<long long>(*ms * 1000));
  if (unset(v::kTimelineFilename))
    if (auto file = core::env_text(v::kHorovodTimeline); file && *file != "DYNAMIC") config.timeline_filename = *file;
  if (unset(v::kTimelineMarkCycles))
    if (auto on = core::env_flag(v::kHorovodTimelineMarkCycles)) config.timeline_mark_cycles = *on;
  if (unset(v::kStallCheckWarningTimeSeconds))
    if (auto s = core::env_number(v::kHorovodStallCheckTimeSeconds))
      config.stall_warning = std::chrono::milliseconds(static_cast<long long>(*s * 1000));
  if (unset(v::kStallCheckShutdownTimeSeconds))
    if (auto s = core::env_number(v::kHorovodStallShutdownTimeSeconds))
      config.stall_shutdown = std::chrono::milliseconds(static_cast<long long>(*s * 1000));
  if (unset(v::kCacheCapacity))
    if (auto n = core::env_integer(v::kHorovodCacheCapacity)) config.cache_capacity = static_cast<std::size_t>(*n);
}

namespace {

void check_argument(bool ok, const std::string& name, const char* why) {
  if (!ok) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("tensor '{}': {}", name, why));
}

// Mixed host/device buffers fail here, on the submitting thread, before the op is negotiated:
// the transport would refuse them only at execution, and an execution error stops the engine
// for every later op of the job.
void check_placement(const OpRequest& r) {
  if (r.kind != Collective::allreduce && r.kind != Collective::allgather) return;  // one buffer
  if (!core::cuda_driver_loaded()) return;
  const core::BufferLocation send = core::locate_buffer(r.send);
  const core::BufferLocation recv = r.recv == r.send ? send : core::locate_buffer(r.recv);
  if (send.device != recv.device)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("tensor '{}': one buffer is device memory (CUDA device {}) and the other host "
                                   "memory; pass both on the device or both on the host",
                                   r.name, send.device ? send.ordinal : recv.ordinal));
  if (send.device && send.ordinal != recv.ordinal)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("tensor '{}': the buffers are on different CUDA devices ({} and {})", r.name,
                                   send.ordinal, recv.ordinal));
}

}  // namespace

void Engine::check_personalized(OpRequest& r) const {
  const std::string& name = r.name;
  if (r.kind == Collective::alltoall) {
    r.varying = true;
    check_argument(r.to_each.size() == static_cast<std::size_t>(size_), name,
                   "an alltoall needs one count per rank (its splits)");
    std::size_t sum = 0;
    for (std::size_t c : r.to_each) sum += c;
    check_argument(sum == r.count, name, "the alltoall's counts per rank do not add up to its element count");
  }
  if (r.varying) {
    check_argument(r.kind == Collective::allgather || r.kind == Collective::alltoall, name,
                   "only an allgather or an alltoall may have a different count per rank");
    check_argument(static_cast<bool>(r.output), name, "an op with a different count per rank needs an output allocator");
    check_argument(r.count == 0 || r.send, name, "send is null");
    r.cacheable = false;  // the counts change from call to call, and every rank's is needed
  }
  if (r.kind == Collective::reducescatter) {
    check_argument(core::valid_op(r.op), name, "unknown reduction op");
    const auto bounds = reducescatter_bounds(shape_of(r), size_);
    const std::size_t mine = bounds[static_cast<std::size_t>(rank_) + 1] - bounds[static_cast<std::size_t>(rank_)];
    check_argument(r.count == 0 || r.send, name, "send is null");
    check_argument(mine == 0 || r.recv, name, "recv is null");
  }
}

std::vector<std::size_t> reducescatter_bounds(const OpShape& shape, int ranks) {
  const std::uint64_t rows = shape.dims.ndim ? static_cast<std::uint64_t>(shape.dims.d[0]) : shape.count;
  const std::uint64_t row = rows ? shape.count / rows : 0;
  const std::uint64_t base = rows / static_cast<std::uint64_t>(ranks), extra = rows % static_cast<std::uint64_t>(ranks);
  std::vector<std::size_t> bounds(static_cast<std::size_t>(ranks) + 1, 0);
  for (int r = 0; r < ranks; ++r) {
    const auto ur = static_cast<std::uint64_t>(r);
    bounds[static_cast<std::size_t>(r) + 1] = bounds[static_cast<std::size_t>(r)] + (base + (ur < extra ? 1 : 0)) * row;
  }
  return bounds;
}

// ---------------------------------------------------------------------------------------------
// Start

Engine::Engine(core::Communicator& comm, EngineConfig config)
    : comm_(comm), config_(std::move(config)), rank_(comm.rank()), size_(comm.size()),
      cache_(config_.cache_capacity, kRoutedCacheEntries), shutdown_seen_(static_cast<std::size_t>(comm.size()), false),
      stall_(config_.stall_warning, config_.stall_shutdown), driver_(new_cycle_driver()),
      inline_capacity_(config_.inline_bytes / kInlineAlign * kInlineAlign) {
  driver_->engine = this;
  index_slots_ = kMinIndexSlots;
  joined_.assign(static_cast<std::size_t>(size_), false);
  bit_entries_.reserve(std::min<std::size_t>(config_.cache_capacity, 4096));
  mark_cycles_ = config_.timeline_mark_cycles;
  if (rank_ == 0 && !config_.timeline_filename.empty()) {
    if (config_.elastic_epoch < 0) {
      timeline_ = std::make_unique<Timeline>(config_.timeline_filename);
    } else {
      timeline_ = std::make_unique<Timeline>(
          config_.timeline_filename,
          Timeline::Continuation{config_.elastic_epoch, fmt::format("elastic world {}: {} ranks", config_.elastic_epoch, size_)});
    }
  }
  thread_ = std::thread([this] { loop(); });
}

void Engine::start_timeline(const std::string& filename, bool mark_cycles) {
  if (filename.empty()) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "start_timeline: the file name is empty");
  if (rank_ != 0) return;
  auto timeline = std::make_unique<Timeline>(filename);
  std::lock_guard cycle(driver_->mutex);
  timeline_ = std::move(timeline);
  mark_cycles_ = mark_cycles;
  bit_arrival_.resize(bit_entries_.size() * static_cast<std::size_t>(size_));
}

void Engine::stop_timeline() {
  std::unique_ptr<Timeline> stopped;
  {
    std::lock_guard cycle(driver_->mutex);
    stopped = std::move(timeline_);
  }
  // Its destructor closes the file as valid JSON.
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

// ---------------------------------------------------------------------------------------------
// Submission

void Engine::throw_pending(const std::string& name) const {
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                     fmt::format("tensor '{}': an op of that name is already pending on rank {}", name, rank_));
}

OpRef Engine::submit(OpRequest request) {
  const std::string& name = request.name;
  check_argument(!name.empty(), name, "an op needs a non-empty name");
  check_argument(core::valid_dtype(request.dtype), name, "unknown dtype");
  check_argument(request.kind != Collective::allreduce || core::valid_op(request.op), name, "unknown reduction op");
  if (request.kind == Collective::allreduce && request.op == RINGRUN_ADASUM)  // refused here, not at execution
    core::check_adasum_arguments(fmt::format("tensor '{}'", name), request.dtype, request.send, request.recv,
                                 request.count);
  if (request.count > 0) {
    if (request.kind == Collective::allreduce || (request.kind == Collective::allgather && !request.varying))
      check_argument(request.send && request.recv, name, "send or recv is null");
    if (request.kind == Collective::broadcast) check_argument(request.recv != nullptr, name, "buffer is null");
  }
  check_personalized(request);
  if (request.count > 0) check_placement(request);
  if (request.kind == Collective::broadcast && (request.root < 0 || request.root >= size_))
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("tensor '{}': broadcast root {} is not a rank (size {})", name, request.root, size_));
  // Not a structured binding: its names are not implicitly moved by `return` (clang refuses the
  // copy; only GCC moves them).
  std::pair<OpRef, OpRef> holds = OpState::create(driver_);  // the engine's, the submitter's
  if (request.on_done) holds.second->call_back(request.on_done, request.on_done_arg);
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (broken_code_) throw RuntimeError(broken_code_, fmt::format("tensor '{}': {}", name, broken_message_));
    if (shutdown_requested_ || stopped_)
      throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("tensor '{}': the engine is shut down (ringrun_finalize)", name));
    NameState* node = note_submission(name);
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

Engine::NameState* Engine::note_submission(const std::string& name) {
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
  return node;
}

EngineStats Engine::stats() const {
  auto get = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return EngineStats{get(counters_.cycles),           get(counters_.cached_submissions), get(counters_.described_submissions),
                     get(counters_.fused_allreduces), get(counters_.fused_tensors),      get(counters_.completed),
                     get(counters_.inline_allreduces), get(counters_.cache_evictions), get(counters_.listed_cycles)};
}

// ---------------------------------------------------------------------------------------------
// Run: the background thread

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
    wait_for_cycle(seen_cycles, seen_at);
    std::unique_lock cycle(driver_->mutex);
    if (finished_) break;
    cycle_once();
    if (finished_) break;
  }
  stop_loop();
}

void Engine::wait_for_cycle(std::uint64_t& seen_cycles, Clock::time_point& seen_at) {
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

void Engine::stop_loop() {
  std::vector<LocalOp> leftover;
  int code = RINGRUN_ERR_NOT_INITIALIZED;
  std::string cause = "the engine stopped before the op was negotiated";
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    leftover.swap(submitted_);
    batch_noticed_ = false;
    has_submitted_.store(false, std::memory_order_relaxed);
    // An op submitted while the breaking cycle ran fails with what broke the engine (a dead
    // peer, named), not with a bare "stopped".
    if (broken_code_) {
      code = broken_code_;
      cause = broken_message_;
    }
  }
  for (auto& op : leftover) {
    std::string message = fmt::format("tensor '{}': {}", op.request.name, cause);
    finish(std::move(op), code, std::move(message));
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

// ---------------------------------------------------------------------------------------------
// Run: one cycle, by the thread or a waiter

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
    break_down(std::current_exception());
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

void Engine::break_down(std::exception_ptr error) {
  // The communicator is broken (a peer died, a transport failed): nothing can run any more.
  std::string message = "the engine stopped";
  int code = RINGRUN_ERR_INTERNAL;
  try {
    std::rethrow_exception(error);
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

// ---------------------------------------------------------------------------------------------
// Stop

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
  }
  wake_.notify_one();
  if (!thread_.joinable()) return;
  thread_.join();
  release();
}

void Engine::release() {
  // No cycle runs any more (the thread left its loop once finished_), and a submission is refused
  // before it touches the tables. A stopped engine may stay allocated (api/engine_c_api.cpp): what it
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
  cache_.clear();
  inline_sources_ = {};
  join_op_.reset();
}

}  // namespace ringrun::engine
