// Join (engine.hpp, "Join"), as Horovod's: a rank that calls join() has no more ops; until every
// rank has joined, it takes part in the allreduces the others still run with a neutral input (0
// for SUM and AVERAGE, the identity of MIN, MAX and PRODUCT; AVERAGE still divides by every rank),
// so that ranks with fewer batches than others do not hang them. The other collectives cannot be
// stood in for: they fail on every rank. Once every rank has joined, every join completes with the
// rank that joined last. Joins travel as a flag in the records: every rank sees the same flags in
// the same cycle, so every rank decides the same stand-ins and the same end.
#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "engine/engine.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

using core::Collective;

namespace {

template <typename T> void fill(std::byte* buf, std::size_t count, T value) {
  for (std::size_t i = 0; i < count; ++i) std::memcpy(buf + i * sizeof(T), &value, sizeof(T));
}

template <typename T> void fill_identity(std::byte* buf, std::size_t count, ringrun_op op) {
  switch (op) {
    case RINGRUN_MIN: return fill<T>(buf, count, std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                                        : std::numeric_limits<T>::max());
    case RINGRUN_MAX: return fill<T>(buf, count, std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                                        : std::numeric_limits<T>::lowest());
    case RINGRUN_PRODUCT: return fill<T>(buf, count, T(1));
    default: return;  // zeros: the buffer starts zeroed
  }
}

// The neutral element of op for count elements of dtype, in a zeroed buffer.
void fill_neutral(std::byte* buf, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  if (op == RINGRUN_SUM || op == RINGRUN_AVERAGE) return;
  switch (dtype) {
    case RINGRUN_FLOAT32: return fill_identity<float>(buf, count, op);
    case RINGRUN_FLOAT64: return fill_identity<double>(buf, count, op);
    case RINGRUN_INT32: return fill_identity<std::int32_t>(buf, count, op);
    case RINGRUN_INT64: return fill_identity<std::int64_t>(buf, count, op);
    case RINGRUN_UINT8: return fill_identity<std::uint8_t>(buf, count, op);
    case RINGRUN_INT8: return fill_identity<std::int8_t>(buf, count, op);
    case RINGRUN_INT16: return fill_identity<std::int16_t>(buf, count, op);
    case RINGRUN_BOOL: return fill<std::uint8_t>(buf, count, op == RINGRUN_MAX ? 0 : 1);  // or: 0, and: 1
    case RINGRUN_FLOAT16:
      return fill<std::uint16_t>(buf, count, op == RINGRUN_MIN ? 0x7c00 : op == RINGRUN_MAX ? 0xfc00 : 0x3c00);
    case RINGRUN_BFLOAT16:
      return fill<std::uint16_t>(buf, count, op == RINGRUN_MIN ? 0x7f80 : op == RINGRUN_MAX ? 0xff80 : 0x3f80);
  }
}

}  // namespace

void Engine::note_join(int rank, std::uint8_t flags) {
  if (!(flags & kFlagJoined)) return;
  if (joined_[static_cast<std::size_t>(rank)]) return;
  joined_[static_cast<std::size_t>(rank)] = true;
  ++joined_count_;
  last_joined_ = rank;  // records are applied in rank order: the highest of one cycle is last
}

const OpShape& Engine::some_shape(Entry& entry) {
  if (entry.uniform) return cache_.shape(static_cast<std::size_t>(entry.bit));
  const std::optional<OpShape>* submitted = shapes(entry);
  for (int r = 0; r < size_; ++r)
    if (submitted[r]) return *submitted[r];
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: tensor '{}' has no submission", entry_name(entry)));
}

void Engine::ready_with_joined() {
  // An allreduce every rank that has not joined submitted is ready (its present count stays short
  // of the size by the joined ranks that did not submit it). Any other collective is ready to fail
  // as soon as one rank submitted it: no joined rank can stand in for it, and the ranks need not
  // call it alike (unnamed ops after some ranks skipped some would never meet), so nobody waits.
  auto consider = [&](Entry& entry) {
    if (entry.present == 0 || entry.present == size_ || entry.uniform) return;
    const std::optional<OpShape>* submitted = shapes(entry);
    if (some_shape(entry).kind == Collective::allreduce)
      for (int r = 0; r < size_; ++r)
        if (!submitted[r] && !joined_[static_cast<std::size_t>(r)]) return;
    if (std::find(ready_.begin(), ready_.end(), &entry) == ready_.end()) ready_.push_back(&entry);
  };
  for (Entry& entry : bit_entries_) consider(entry);
  for (auto& [name, entry] : named_entries_) consider(entry);
}

void Engine::stand_in_for_joined(std::vector<Entry*>& ready) {
  for (Entry*& entry : ready) {
    if (entry->present == size_ || entry->uniform) continue;
    const OpShape& shape = some_shape(*entry);
    std::vector<int> joined;
    const std::optional<OpShape>* submitted = shapes(*entry);
    for (int r = 0; r < size_; ++r)
      if (!submitted[r]) joined.push_back(r);
    if (shape.kind != Collective::allreduce) {
      fail_entry(*entry, RINGRUN_ERR_MISMATCH,
                 fmt::format("tensor '{}': {} is not supported while {} {} called join(): only allreduces are",
                             entry_name(*entry), core::collective_name(shape.kind), core::name_ranks(joined),
                             joined.size() > 1 ? "have" : "has"));
      entry = nullptr;
      continue;
    }
    if (entry->local) continue;  // this rank submitted it before it joined
    OpRequest r;
    r.kind = Collective::allreduce;
    r.name = entry_name(*entry);
    r.count = shape.count;
    r.dtype = shape.dtype;
    r.op = shape.op;
    r.dims = shape.dims;
    LocalOp& op = entry->local.emplace(std::move(r), OpRef(), nullptr);
    op.stand_in = true;
    op.scratch.assign(std::max<std::size_t>(1, shape.count * core::dtype_size(shape.dtype)), std::byte{0});
    fill_neutral(op.scratch.data(), shape.count, shape.dtype, shape.op);
    op.request.send = op.request.recv = op.scratch.data();
  }
  std::erase(ready, nullptr);
}

void Engine::finish_join() {
  if (join_op_) {
    if (join_op_->request.recv) std::memcpy(join_op_->request.recv, &last_joined_, sizeof last_joined_);
    complete_ok(*join_op_);
    join_op_.reset();
  }
  std::fill(joined_.begin(), joined_.end(), false);
  joined_count_ = 0;
  last_joined_ = -1;
}

}  // namespace ringrun::engine
