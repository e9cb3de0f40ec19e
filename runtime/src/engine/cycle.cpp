// The cycle (engine.hpp, "What one cycle does"): the protocol in order, each step a call into the
// file that owns it. Runs under driver_->mutex, by the background thread or a waiting thread.
//
// Owns: the order of the steps, the decision between failing (stalls, finalize) and executing,
// and the cycle's end (cache insertions only once no Entry pointer is held).
#include <algorithm>

#include <fmt/format.h>

#include "engine/engine.hpp"
#include "engine/timeline.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

void Engine::run_cycle(std::vector<LocalOp>& fresh, bool shutdown) {
  // What the cycle stamps (first seen, stall checks) counts in seconds: the coarse clock unless
  // the timeline wants microseconds. Both count from the same origin as steady_clock.
  const auto now = timeline_ ? Clock::now() : coarse_now();
  // One bit per cache entry in use (the same number on every rank: the cache changes only after
  // a cycle's agreement), so the record stays small until the cache fills; then inline data and
  // index lists as the last cycle's records asked for.
  const RecordLayout layout = record_layout(cache_.size(), inline_area_, index_slots_);
  take_join(fresh);
  // 1. Write this rank's record: cache bits, descriptions, inline data, rank 0's stall verdicts.
  Writer payload;
  const std::size_t cached = write_record(layout, fresh, shutdown, now, payload);
  // 2. Exchange the records: the fixed parts, then the payloads if any rank has one.
  const std::size_t max_payload = exchange_records(layout, payload, fresh.size(), cached);
  // 3. One small cached op everywhere and nothing else: complete it from the records.
  if (max_payload == 0 && complete_lone_inline(layout, fresh)) return;
  // 4. Apply every rank's record in rank order: every rank builds the same table.
  StallFailures stalled;
  apply_records(layout, max_payload, now, stalled);
  adopt_fresh(fresh);
  if (pending_entries_) anyone_active_ = true;
  // 5. Fail what rank 0 found stalled, or everything at a finalize; else execute what is ready.
  decide(stalled, now);
  if (joined_count_ == size_) finish_join();
  // 6. Grow the cache, forget this cycle's records.
  end_cycle();
}

void Engine::take_join(std::vector<LocalOp>& fresh) {
  // A join is no named op: it becomes this rank's join flag until every rank has joined.
  auto join = std::find_if(fresh.begin(), fresh.end(), [](const LocalOp& op) { return op.request.join; });
  if (join == fresh.end()) return;
  for (auto it = join; it != fresh.end(); ++it) {
    if (!it->request.join) continue;
    if (join_op_)
      finish(std::move(*it), RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("join: rank {} has called join already", rank_));
    else
      join_op_.emplace(std::move(*it));
  }
  std::erase_if(fresh, [](const LocalOp& op) { return op.request.join; });
}

void Engine::adopt_fresh(std::vector<LocalOp>& fresh) {
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
}

void Engine::decide(const StallFailures& stalled, Clock::time_point now) {
  for (auto& [name, message] : stalled) {
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
                    fmt::format("ringrun_finalize() was called on {} while the op was pending", core::name_ranks(finalizing)));
    return;
  }
  ++cycle_number_;
  // Horovod's marker name: tools that read its timelines find the cycles.
  if (timeline_ && mark_cycles_ && pending_entries_) timeline_->mark("CYCLE_START", now);
  // Usually in order already (a step's names applied in bit order as they were created).
  auto by_seq = [](const Entry* a, const Entry* b) { return a->seq < b->seq; };
  if (!std::is_sorted(ready_.begin(), ready_.end(), by_seq)) std::sort(ready_.begin(), ready_.end(), by_seq);
  cache_inserts_.clear();
  if (!ready_.empty()) execute(ready_);
}

void Engine::end_cycle() {
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

// A waiter runs the cycles itself (op_state.hpp): here, beside the cycle, because it drives the
// engine, which the op states are a part of.
void OpState::drive_cycles(bool bounded, std::chrono::steady_clock::time_point deadline) {
  // Run the engine's cycles on this thread until the op is done: no hand-off to the background
  // thread and back. When another thread is in a cycle, block on the lock (no spinning): that
  // cycle may well complete this op. A waiter counts itself in `waiters` (the background thread
  // then stands back) once it has to block or to run a second cycle; one that gets the lock at
  // once and is done after one cycle, a lone op's case, skips two locked instructions.
  if (!driver_ || done()) return;
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
      return;
    }
    if (done() || (bounded && std::chrono::steady_clock::now() >= deadline)) {
      leave(engine);
      return;
    }
    engine->cycle_once();
    if (done() && !engine->finished_) {
      leave(engine);
      return;
    }
    cycle.unlock();
    if (!counted) {
      driver_->waiters.fetch_add(1);
      counted = true;
    }
    cycle.lock();
  }
}

}  // namespace ringrun::engine
