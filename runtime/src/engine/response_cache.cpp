// The response cache (response_cache.hpp): its two rooms, insertion and eviction.
#include "engine/response_cache.hpp"

namespace ringrun::engine {

// Two rooms: the program's names (capacity_) and the routed synchronous calls'
// (routed_capacity_); a name only ever displaces one of its own room. Without the routed room a
// program whose step fills the cache exactly would lose a gradient's entry to every barrier or
// loss reduction between steps, and get it back under another bit, out of memory order.
bool ResponseCache::has_room(const OpShape& shape) const {
  return shape.routed ? routed_ < routed_capacity_ : entries_.size() - routed_ < capacity_;
}

void ResponseCache::append(Description description, std::uint64_t cycle) {
  index_.emplace(description.name, entries_.size());
  if (description.shape.routed) ++routed_;
  entries_.push_back(std::move(description));
  used_.push_back(cycle);
  hinted_by_.push_back(nullptr);
}

void ResponseCache::replace(std::size_t bit, Description description, std::uint64_t cycle) {
  // As in Horovod's response cache: every rank evicts the same entry, so bits keep their meaning.
  index_.erase(entries_[bit].name);
  index_.emplace(description.name, bit);
  entries_[bit] = std::move(description);
  used_[bit] = cycle;
  hinted_by_[bit] = nullptr;
}

void ResponseCache::reshape(std::size_t bit, const OpShape& shape) {
  // (A program that names an async op like a routed call moves the entry between rooms.)
  if (entries_[bit].shape.routed != shape.routed) routed_ = shape.routed ? routed_ + 1 : routed_ - 1;
  entries_[bit].shape = shape;
}

void ResponseCache::clear() {
  entries_ = {};
  index_.clear();
  used_ = {};
  hinted_by_ = {};
  routed_ = 0;
}

}  // namespace ringrun::engine
