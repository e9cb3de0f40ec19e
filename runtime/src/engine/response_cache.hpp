// The response cache: names every rank has completed before, each under a cache bit, so that a
// step's names travel as bits (or short index lists) instead of full descriptions. Every rank
// completes the same ops in the same cycles and so makes the same insertions and evictions: a bit
// means the same name everywhere without a round trip.
//
// Owns: the descriptions by bit, the index by name, LRU stamps, the two rooms (the program's
// names, cache_capacity; the routed synchronous calls', kRoutedCacheEntries), and the bit hints'
// owners. Touches nothing else: whether a bit's name is pending (never evicted) is asked of the
// caller. The tables indexed by bit that hold pending ops (Engine::bit_entries_ and the per-rank
// shape, arrival and inline tables) are the engine's and grow when insert() appends a bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/negotiation_record.hpp"

namespace ringrun::engine {

class ResponseCache {
 public:
  // capacity: the program's room (0: no cache); routed_capacity: the routed calls' room.
  ResponseCache(std::size_t capacity, std::size_t routed_capacity) : capacity_(capacity), routed_capacity_(routed_capacity) {}

  std::size_t size() const { return entries_.size(); }  // bits in use, both rooms
  std::size_t capacity() const { return capacity_; }
  const OpShape& shape(std::size_t bit) const { return entries_[bit].shape; }
  const std::string& name(std::size_t bit) const { return entries_[bit].name; }
  // The name's bit, or -1.
  int find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : static_cast<int>(it->second);
  }

  // A name's last found bit (NameState::bit_hint) still names it: bits change hands on eviction,
  // and whoever found a bit last is recorded per bit, so this is a pointer comparison per op.
  // (A node freed and another allocated at its address starts without a hint, so a stale
  // pointer here is never confirmed.)
  // node: the identity of whoever holds the hint (the engine's node for the name), never dereferenced.
  bool hint_confirmed(int hint, const void* node) const {
    return hint >= 0 && static_cast<std::size_t>(hint) < entries_.size() && hinted_by_[static_cast<std::size_t>(hint)] == node;
  }
  void hinted(std::size_t bit, const void* node) { hinted_by_[bit] = node; }

  // The bit completed an op in cycle `cycle` (LRU); its shape may have changed (described in
  // full by every rank that changed it).
  void used(std::size_t bit, std::uint64_t cycle) { used_[bit] = cycle; }
  void update(std::size_t bit, const OpShape& shape, std::uint64_t cycle) {
    // Compared first: in the steady state nothing changes, and the cache line stays clean.
    if (!(entries_[bit].shape == shape)) reshape(bit, shape);
    used_[bit] = cycle;
  }

  enum class Inserted { appended, evicted, full };
  // A name completed outside the cache. Appended as a new bit while its room has space; else the
  // least recently used bit of its room (the lowest among equals) whose name is not pending
  // (pending(bit) false) changes hands; `full` when every one is pending.
  template <typename Pending>
  Inserted insert(Description description, std::uint64_t cycle, Pending&& pending) {
    if (has_room(description.shape)) {
      append(std::move(description), cycle);
      return Inserted::appended;
    }
    std::size_t victim = entries_.size();
    for (std::size_t bit = 0; bit < entries_.size(); ++bit)
      if (entries_[bit].shape.routed == description.shape.routed && !pending(bit) &&
          (victim == entries_.size() || used_[bit] < used_[victim]))
        victim = bit;
    if (victim == entries_.size()) return Inserted::full;
    replace(victim, std::move(description), cycle);
    return Inserted::evicted;
  }

  void clear();  // everything, memory included (the engine's release)

 private:
  bool has_room(const OpShape& shape) const;
  void append(Description description, std::uint64_t cycle);
  void replace(std::size_t bit, Description description, std::uint64_t cycle);
  void reshape(std::size_t bit, const OpShape& shape);

  const std::size_t capacity_;
  const std::size_t routed_capacity_;
  std::vector<Description> entries_;                // by bit
  std::vector<std::uint64_t> used_;                 // by bit: the cycle it last completed an op (LRU)
  std::vector<const void*> hinted_by_;              // by bit: the node whose hint last found it
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t routed_ = 0;                          // bits whose shape is routed
};

}  // namespace ringrun::engine
