// The table of pending names (engine.hpp, "The table"): entries by cache bit and by name, what
// each rank submitted, their completion and failure, the cache's upkeep after a cycle, and the
// walk of the stall inspector over them. Every rank applies the same records in the same order,
// so every rank's table is the same.
//
// Owns: bit_entries_, named_entries_, bit_shapes_, bit_arrival_, the pending counts, local_bits_,
// finished_ops_. Touches: the response cache (update, insert), the op states (complete),
// the stall inspector (verdicts), the timeline (arrivals, stall marks).
#include <algorithm>

#include <fmt/format.h>

#include "engine/engine.hpp"
#include "engine/timeline.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

const std::string& Engine::entry_name(const Entry& entry) const {
  return entry.bit >= 0 ? cache_.name(static_cast<std::size_t>(entry.bit)) : *entry.name;
}

std::optional<OpShape>* Engine::shapes(Entry& entry) {
  return entry.bit >= 0 ? bit_shapes_.data() + static_cast<std::size_t>(entry.bit) * static_cast<std::size_t>(size_)
                        : entry.per_rank.data();
}

Engine::Clock::time_point* Engine::arrivals(Entry& entry) {
  return entry.bit >= 0 ? bit_arrival_.data() + static_cast<std::size_t>(entry.bit) * static_cast<std::size_t>(size_)
                        : entry.arrival.data();
}

Engine::Entry* Engine::find_entry(const std::string& name) {
  if (const int bit = cache_.find(name); bit >= 0) {
    Entry& entry = bit_entries_[static_cast<std::size_t>(bit)];
    return entry.present ? &entry : nullptr;
  }
  auto named = named_entries_.find(name);
  return named == named_entries_.end() ? nullptr : &named->second;
}

Engine::Entry& Engine::entry_for_name(const std::string& name) {
  // A name the cache holds meets the cache bits other ranks sent for it, even when this rank
  // describes it in full (a changed shape): its entry is the bit's.
  if (const int bit = cache_.find(name); bit >= 0) return bit_entries_[static_cast<std::size_t>(bit)];
  auto [it, created] = named_entries_.try_emplace(name);
  Entry& entry = it->second;
  if (created) {
    entry.name = &it->first;
    entry.per_rank.resize(static_cast<std::size_t>(size_));
    entry.arrival.resize(static_cast<std::size_t>(size_));
  }
  return entry;
}

void Engine::apply_shape(Entry& entry, int rank, const OpShape& shape, Clock::time_point now) {
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

// ---------------------------------------------------------------------------------------------
// Completion and failure

void Engine::finish(LocalOp op, int code, std::string message) {
  finished_ops_.push_back(Finished{std::move(op.state), op.name_state, code, std::move(message)});
}

void Engine::complete_ok(LocalOp& op) {
  if (op.stand_in) return;  // a joined rank's part: nobody waits for it
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
  if (entry.local && entry.local->stand_in) {
    entry.local.reset();
  } else if (entry.local) {
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
  if (entry.local && !entry.local->stand_in) {
    const std::string& name = entry_name(entry);
    finish(std::move(*entry.local), code, message.rfind("tensor '", 0) == 0 ? message : fmt::format("tensor '{}': {}", name, message));
  }
  reset_entry(entry);
}

void Engine::fail_everything(int code, const std::string& message) {
  if (join_op_) {
    finish(std::move(*join_op_), code, fmt::format("join: {}", message));
    join_op_.reset();
  }
  for (Entry& entry : bit_entries_)
    if (entry.present || entry.local) fail_entry(entry, code, message);
  std::vector<Entry*> named;
  for (auto& [name, entry] : named_entries_) named.push_back(&entry);
  for (Entry* entry : named) fail_entry(*entry, code, message);
}

void Engine::finish_ok(Entry& entry) {
  update_cache(entry, some_shape(entry));
  if (entry.local) complete_ok(*entry.local);
  reset_entry(entry);
}

// ---------------------------------------------------------------------------------------------
// The response cache's upkeep

void Engine::update_cache(Entry& entry, const OpShape& shape) {
  if (entry.bit >= 0) {
    // A changed shape was described in full by every rank that changed it.
    cache_.update(static_cast<std::size_t>(entry.bit), shape, cycle_number_);
    return;
  }
  if (!shape.cacheable || config_.cache_capacity == 0) return;
  cache_inserts_.push_back(Description{*entry.name, shape});  // after the cycle's ops: see bit_entries_
}

void Engine::insert_into_cache(Description description) {
  // Never evicts a name that is pending (its bits already went out). Every rank completes the
  // same ops in the same cycles, so every rank inserts and evicts the same.
  const auto inserted = cache_.insert(std::move(description), cycle_number_,
                                      [this](std::size_t bit) { return bit_entries_[bit].present != 0; });
  if (inserted == ResponseCache::Inserted::appended) grow_bit_tables();
  else if (inserted == ResponseCache::Inserted::evicted) counters_.add(counters_.cache_evictions, 1);
}

// ---------------------------------------------------------------------------------------------
// Stalls (rank 0)

void Engine::check_stalls(Clock::time_point now, StallFailures& to_fail) {
  if (!stall_.enabled()) return;
  if (pending_entries_ == 0) return;
  for (Entry& entry : bit_entries_) check_stall(entry, now, to_fail);
  for (auto& [name, entry] : named_entries_) check_stall(entry, now, to_fail);
}

void Engine::check_stall(Entry& entry, Clock::time_point now, StallFailures& to_fail) {
  if (entry.present == 0 || entry.present == size_) return;
  const auto verdict = stall_.judge(entry.first_seen, entry.last_warned, now);
  if (verdict == StallInspector::Verdict::none) return;
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
  const std::string description = StallInspector::describe(name, what, now - entry.first_seen, submitted, missing);
  if (verdict == StallInspector::Verdict::shut_down) {
    to_fail.emplace_back(name, stall_.shutdown_message(description));
  } else {
    StallInspector::warn(description);
    entry.last_warned = now;
    if (timeline_) timeline_->mark("stall: " + name, now);
  }
}

}  // namespace ringrun::engine
