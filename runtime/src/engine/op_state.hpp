// The op states and their completion: what a submitter holds for one op (OpRef, the C API's
// handle), how it completes, how a waiter waits for it, and the free lists that recycle them.
//
// Owns: OpState, OpRef, the per-thread free lists (op_state.cpp), CycleDriver (one per engine,
// never freed). May touch: the engine only through its CycleDriver, to run cycles while waiting
// (Engine::cycle_once, Engine::finished_, Engine::waiter_left; OpState is the engine's friend).
//
// Invariants (see op_state.cpp):
// - Completion is lock-free: a store of done_ per op. complete() adds a seq_cst fence and wakes
//   sleepers; complete_quietly() does neither, and is enough while the engine runs, because a
//   waiter reads done_ only under CycleDriver::mutex (held by the completing cycle) and sleeps
//   on done_ only once it has seen the engine finished, when no cycle runs any more.
// - Exactly two parties hold a state; the second to let go recycles it.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "ringrun/ringrun.h"

namespace ringrun::engine {

class Engine;

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
inline constexpr bool kFences = !RINGRUN_ENGINE_TSAN;
inline constexpr std::memory_order kDoneStore = kFences ? std::memory_order_release : std::memory_order_seq_cst;
inline constexpr std::memory_order kDoneLoad = kFences ? std::memory_order_acquire : std::memory_order_seq_cst;
inline constexpr std::memory_order kSleepersLoad = kFences ? std::memory_order_relaxed : std::memory_order_seq_cst;

// Whoever runs a negotiation cycle holds `mutex`: the background thread, or a thread blocked in
// OpState::wait(), which then runs the cycles itself (two thread hand-offs fewer per op: what
// keeps one small op within a few microseconds of a plain allreduce). A handle may outlive its
// engine (engine is null once the engine has stopped), so drivers are never freed before the
// process exits (new_cycle_driver): a counted reference per op cost two locked instructions per
// op, a driver is a few dozen bytes per engine ever started.
struct CycleDriver {
  std::mutex mutex;
  Engine* engine = nullptr;      // guarded by mutex
  // Threads in OpState::wait() in line for mutex or running cycles (all but one that got the
  // mutex at once for one cycle): the background thread stands back.
  std::atomic<int> waiters{0};
};

// A new driver, reachable until exit (never destroyed: an engine may shut down in a static
// destructor, and handles may outlive it).
CycleDriver* new_cycle_driver();

class OpRef;
struct OpStateFreeList;

// The completion of one submitted op. Exactly two parties hold it: whoever submitted it (an
// OpRef, or the C API's handle) and the engine (until the op is done and its sleepers woken);
// the second to let go recycles it (OpRef::reset). Recycled states go to a free list of the
// releasing thread, so a training loop's submissions reuse the last step's states: no malloc, no
// free, and no reference count beyond one exchange per party.
class OpState {
 public:
  // The first call counts. Called by whoever runs the engine's cycle (under CycleDriver::mutex),
  // so calls never race each other.
  void complete(int code, std::string message);
  // complete() without the fence and the wake-up (false if it was done already): for a cycle
  // while the engine runs, when no waiter can be asleep on it (Engine::complete_ok).
  // (Inline: one per op, on the lone op's path.)
  bool complete_quietly(int code, std::string message) {
    if (done_.load(std::memory_order_relaxed)) return false;
    code_ = code;
    if (!message.empty()) message_ = std::move(message);
    done_.store(true, kDoneStore);
    if (on_done_) run_callback();
    return true;
  }
  int wait();                 // blocks until done (running the engine's cycles meanwhile); the op's status
  // wait() until the deadline: true once done (then code() is the status), false when time ran out.
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  // The submitter's hold becomes a callback (ringrun_request::on_done): called once at completion,
  // then the hold is let go. Set before the engine sees the op.
  void call_back(ringrun_done_fn fn, void* arg) {
    on_done_ = fn;
    on_done_arg_ = arg;
  }
  bool done() const { return done_.load(std::memory_order_acquire); }
  int code() const;           // valid once done()
  std::string message() const;  // "" on success; valid once done()

  // A new state for an op of the engine that driver runs, with its two references.
  static std::pair<OpRef, OpRef> create(CycleDriver* driver);

 private:
  friend class OpRef;
  friend struct OpStateFreeList;
  OpState() = default;
  void let_go();  // one party is done with it: the second recycles it
  void run_callback();  // at completion: the callback, then the submitter's hold let go
  // wait()'s part: runs the engine's cycles until done or the deadline (if bounded).
  void drive_cycles(bool bounded, std::chrono::steady_clock::time_point deadline);
  void wake_sleepers();  // after a seq_cst fence that follows the store of done_

  // No mutex: a step completes a thousand of these, and each is a store; the futex wake happens
  // only for a thread that sleeps (the waiting thread is usually the one completing them).
  std::atomic<bool> done_{false};     // code_ and message_ are written
  std::atomic<bool> let_go_{false};   // one of the two parties let go
  std::atomic<int> sleepers_{0};      // threads blocked in wait() on done_
  int code_ = 0;
  CycleDriver* driver_ = nullptr;  // lives as long as the process (new_cycle_driver)
  ringrun_done_fn on_done_ = nullptr;
  void* on_done_arg_ = nullptr;
  std::string message_;
  OpState* next_free_ = nullptr;   // in a thread's free list
};

// One party's hold on an OpState: move-only; lets go when reset or destroyed.
class OpRef {
 public:
  OpRef() = default;
  OpRef(OpRef&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  OpRef& operator=(OpRef&& other) noexcept {
    if (this != &other) {
      reset();
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~OpRef() { reset(); }
  OpState* operator->() const { return state_; }
  OpState& operator*() const { return *state_; }
  OpState* get() const { return state_; }
  explicit operator bool() const { return state_ != nullptr; }
  void reset() {
    if (state_) std::exchange(state_, nullptr)->let_go();
  }
  // The C API's handle: the raw state, to be adopted back by the wait.
  OpState* release() { return std::exchange(state_, nullptr); }
  static OpRef adopt(OpState* state) { return OpRef(state); }

 private:
  explicit OpRef(OpState* state) : state_(state) {}
  OpState* state_ = nullptr;
};

}  // namespace ringrun::engine
