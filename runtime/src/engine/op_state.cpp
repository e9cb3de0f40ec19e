// The op states and their completion (op_state.hpp): the fences, the free lists, waits.
#include "engine/op_state.hpp"

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

namespace ringrun::engine {

namespace {

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
  on_done_ = nullptr;
  on_done_arg_ = nullptr;
  message_.clear();
  OpStateFreeList::push(this);
}

void OpState::run_callback() {
  const ringrun_done_fn fn = std::exchange(on_done_, nullptr);
  fn(on_done_arg_, code_, message_.c_str());
  let_go();
}

void OpState::complete(int code, std::string message) {
  if (!complete_quietly(code, std::move(message))) return;
  full_fence();
  wake_sleepers();
}

void OpState::wake_sleepers() {
  // After a seq_cst fence that follows the store of done_, against the sleeper's increment, fence,
  // then load: either it sees done_ or this sees it sleeping.
  if (sleepers_.load(kSleepersLoad) > 0) done_.notify_all();
}

int OpState::wait() {
  drive_cycles(false, {});
  if (!done_.load(std::memory_order_acquire)) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    full_fence();
    while (!done_.load(kDoneLoad)) done_.wait(false, kDoneLoad);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  return code_;
}

bool OpState::wait_until(std::chrono::steady_clock::time_point deadline) {
  drive_cycles(true, deadline);
  // Past the cycles only when the engine has stopped (its last cycle fails what is left) or the
  // time ran out: short sleeps, no futex wait without a timeout.
  while (!done_.load(kDoneLoad)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int OpState::code() const { return done() ? code_ : 0; }

std::string OpState::message() const { return done() ? message_ : std::string(); }

CycleDriver* new_cycle_driver() {
  static auto* mutex = new std::mutex;
  static auto* drivers = new std::vector<std::unique_ptr<CycleDriver>>;
  std::lock_guard lock(*mutex);
  return drivers->emplace_back(std::make_unique<CycleDriver>()).get();
}

}  // namespace ringrun::engine
