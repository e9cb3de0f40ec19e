// Negotiation (engine.hpp, "Negotiation"): what this rank writes into its record each cycle, the
// exchange, and how every rank applies the gathered records in rank order. The format itself is
// negotiation_record.hpp's; this file decides what goes in.
//
// Owns: this cycle's records (mine_, all_fixed_, all_payload_), the inline area and list slots
// of the next cycle, the inline sources. Touches: the response cache (reads bits and shapes,
// confirms hints), the table (apply_shape, entry_for_name), the stall inspector (rank 0 looks
// while writing), completion (the lone op's shortcut completes its op).
#include <time.h>

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "engine/engine.hpp"
#include "engine/timeline.hpp"
#include "core/device_memory.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

using core::Collective;

Engine::Clock::time_point Engine::coarse_now() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec)));
}

OpShape Engine::shape_of(const OpRequest& r) {
  return OpShape{r.kind, r.dtype, r.op, r.root, r.count, r.cacheable, r.routed, r.varying, r.dims};
}

bool Engine::cuda_driver_loaded(Clock::time_point coarse) {
  if (cuda_loaded_) return true;
  if (coarse == cuda_probed_at_) return false;
  cuda_probed_at_ = coarse;
  cuda_loaded_ = core::cuda_driver_loaded();
  return cuda_loaded_;
}

// ---------------------------------------------------------------------------------------------
// Writing this rank's record

std::size_t Engine::write_record(const RecordLayout& layout, std::vector<LocalOp>& fresh, bool shutdown,
                                 Clock::time_point now, Writer& payload) {
  mine_.assign(layout.fixed_bytes, std::byte{0});
  // The common case of a latency-bound program, one cached small allreduce and nothing else
  // pending: the same record, written directly (a lone op's time is mostly bookkeeping).
  if (fresh.size() == 1 && !shutdown && !timeline_ && !join_op_ && write_lone_record(layout, fresh[0], now)) {
#ifdef RINGRUN_CHECKED
    const std::vector<std::byte> direct = mine_;
    mine_.assign(layout.fixed_bytes, std::byte{0});
    const std::size_t cached = write_general_record(layout, fresh, shutdown, now, payload);
    if (mine_ != direct || !payload.bytes().empty() || cached != 1)
      throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: tensor '{}': the lone op's record differs from "
                                                           "the general one",
                                                           fresh[0].request.name));
#endif
    return 1;
  }
  return write_general_record(layout, fresh, shutdown, now, payload);
}

std::size_t Engine::write_general_record(const RecordLayout& layout, std::vector<LocalOp>& fresh, bool shutdown,
                                         Clock::time_point now, Writer& payload) {
  // Cache bits for names the cache knows as submitted, full descriptions for the rest, the inline
  // data, and (rank 0) the stall shutdowns it decided.
  const std::size_t cached = write_submissions(layout, fresh, now, payload);
  // Listed: as many submitted bits as there are slots; the rest in the payload.
  const std::size_t listed = std::min(listed_bits_.size(), layout.slots);
  if (listed < listed_bits_.size()) write_cached_bits(payload, listed_bits_.data() + listed, listed_bits_.size() - listed);
  RecordHeader header = write_inline(layout, fresh, listed);
  StallFailures stall_failures;
  if (rank_ == 0 && stall_.due(now)) {
    stall_.looked(now);
    check_stalls(now, stall_failures);
  }
  for (auto& [name, message] : stall_failures) write_stall_failure(payload, name, message);
  header.payload_bytes = static_cast<std::uint32_t>(payload.bytes().size());
  header.flags = static_cast<std::uint8_t>((shutdown ? kFlagShutdown : 0) | (local_pending_ + fresh.size() ? kFlagPending : 0) |
                                           (join_op_ ? kFlagJoined | kFlagPending : 0));
  header.indices_wanted = static_cast<std::uint32_t>(std::min<std::size_t>(cached + header.indices_wanted, UINT32_MAX));
  header.listed = static_cast<std::uint32_t>(listed);
  write_header(mine_.data(), layout, header);
  return cached;
}

std::size_t Engine::write_submissions(const RecordLayout& layout, std::vector<LocalOp>& fresh, Clock::time_point now,
                                      Writer& payload) {
  listed_bits_.clear();
  std::size_t cached = 0;
  const bool cuda = !fresh.empty() && cuda_driver_loaded(timeline_ ? coarse_now() : now);
  for (auto& op : fresh) {
    const OpRequest& r = op.request;
    const OpShape shape = shape_of(r);
    int& hint = op.name_state->bit_hint;
    if (!cache_.hint_confirmed(hint, op.name_state)) {
      hint = cache_.find(r.name);
      if (hint >= 0) cache_.hinted(static_cast<std::size_t>(hint), op.name_state);
    }
    const int bit = hint;
    if (bit >= 0 && cache_.shape(static_cast<std::size_t>(bit)) == shape) {
      if (layout.listed) listed_bits_.push_back(static_cast<std::uint32_t>(bit));
      else set_record_bit(mine_.data(), kFixedHeaderBytes, static_cast<std::size_t>(bit));
      ++cached;
    } else {
      write_description(payload, r.name, shape);
    }
    op.device = cuda && r.kind == Collective::allreduce && core::locate_buffer(r.recv).device;
    op.bit = bit;
  }
  const std::size_t listed = std::min(listed_bits_.size(), layout.slots);
  for (std::size_t i = 0; i < listed; ++i) set_record_index(mine_.data(), i, listed_bits_[i]);
  return cached;
}

RecordHeader Engine::write_inline(const RecordLayout& layout, const std::vector<LocalOp>& fresh, std::size_t listed) {
  // Inline data: every small allreduce pending here whose name the cache holds as described puts
  // its input in the record, in cache-bit order, each padded to kInlineAlign. When an op becomes
  // ready in a cycle whose records carry it from every rank, each rank reduces it from the records
  // in rank order: one synchronisation per op instead of two (negotiation, then the allreduce).
  // Only a handful of pending ops: with many, they fuse anyway, and scanning them every cycle costs.
  // Returns the header's inline fields; indices_wanted holds the inline candidates only.
  RecordHeader header;
  if (!inline_capacity_ || !cache_.size() || local_pending_ + fresh.size() > kInlineMaxPending) return header;
  auto& candidates = inline_candidates_;
  candidates.clear();
  auto consider = [&](int bit, const LocalOp& op) {
    if (bit < 0 || op.device) return;
    const OpRequest& r = op.request;
    const std::size_t bytes = r.count * core::dtype_size(r.dtype);
    if (r.kind != Collective::allreduce || !r.cacheable || bytes == 0 || bytes > inline_capacity_) return;
    if (!core::elementwise_op(r.op)) return;  // Adasum: reduced by its own exchanges, not from the records
    const OpShape& cached = cache_.shape(static_cast<std::size_t>(bit));
    if (cached.kind != r.kind || cached.dtype != r.dtype || cached.op != r.op || cached.count != r.count) return;
    candidates.emplace_back(bit, &op);
  };
  for (const auto& op : fresh) consider(op.bit, op);
  for (int bit : local_bits_) consider(bit, *bit_entries_[static_cast<std::size_t>(bit)].local);
  std::sort(candidates.begin(), candidates.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::size_t used = 0;
  std::size_t wanted = 0;
  std::size_t listed_inline = 0;
  for (auto& [bit, op] : candidates) {
    const OpRequest& r = op->request;
    const std::size_t bytes = r.count * core::dtype_size(r.dtype);
    const std::size_t padded = round_up(bytes, kInlineAlign);
    wanted += padded;
    if (used + padded > layout.inline_bytes) continue;
    if (layout.listed) {
      if (listed + listed_inline == layout.slots) continue;
      set_record_index(mine_.data(), listed + listed_inline++, static_cast<std::size_t>(bit));
    } else {
      set_record_bit(mine_.data(), layout.inline_bits_at, static_cast<std::size_t>(bit));
    }
    std::memcpy(mine_.data() + layout.inline_data_at + used, r.send, bytes);
    used += padded;
  }
  header.inline_wanted = static_cast<std::uint32_t>(std::min(wanted, inline_capacity_));
  header.indices_wanted = static_cast<std::uint32_t>(candidates.size());
  header.listed_inline = static_cast<std::uint32_t>(listed_inline);
  return header;
}

bool Engine::write_lone_record(const RecordLayout& layout, LocalOp& op, Clock::time_point now) {
  // Exactly what the general writer puts in the (zeroed) record for this one op, or false to
  // leave it to that writer: builds checked with RINGRUN_CHECKED (the sanitizer builds) compare
  // the two for every op taken here.
  const OpRequest& r = op.request;
  if (r.kind != Collective::allreduce || !r.cacheable || !layout.inline_bytes || local_pending_ != 0) return false;
  if (!core::elementwise_op(r.op)) return false;  // as in write_inline
  if (layout.listed && layout.slots < 2) return false;
  if (rank_ == 0 && stall_.due(now)) return false;
  const std::size_t bytes = r.count * core::dtype_size(r.dtype);
  const std::size_t padded = round_up(bytes, kInlineAlign);
  if (bytes == 0 || bytes > inline_capacity_ || padded > layout.inline_bytes) return false;
  const int hint = op.name_state->bit_hint;
  if (!cache_.hint_confirmed(hint, op.name_state)) return false;
  const auto bit = static_cast<std::size_t>(hint);
  if (cache_.shape(bit) != shape_of(r)) return false;
  if (cuda_driver_loaded(now) && core::locate_buffer(r.recv).device) return false;
  op.device = false;
  op.bit = hint;
  std::byte* record = mine_.data();
  if (layout.listed) {
    set_record_index(record, 0, bit);  // submitted
    set_record_index(record, 1, bit);  // inline
  } else {
    set_record_bit(record, kFixedHeaderBytes, bit);
    set_record_bit(record, layout.inline_bits_at, bit);
  }
  std::memcpy(record + layout.inline_data_at, r.send, bytes);
  RecordHeader header;
  header.flags = kFlagPending;
  header.inline_wanted = static_cast<std::uint32_t>(std::min(padded, inline_capacity_));
  header.indices_wanted = 2;  // its submitted bit and its inline bit
  header.listed = 1;
  header.listed_inline = 1;
  write_header(record, layout, header);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The exchange

std::size_t Engine::exchange_records(const RecordLayout& layout, const Writer& payload, std::size_t submitted,
                                     std::size_t cached) {
  const std::size_t fixed_bytes = layout.fixed_bytes;
  all_fixed_.resize(fixed_bytes * static_cast<std::size_t>(size_));
  comm_.allgather_host(mine_.data(), fixed_bytes, RINGRUN_UINT8, all_fixed_.data());
  counters_.add(counters_.cycles, 1);
  if (layout.listed) counters_.add(counters_.listed_cycles, 1);
  counters_.add(counters_.described_submissions, submitted - cached);
  counters_.add(counters_.cached_submissions, cached);

  std::size_t max_payload = 0;
  std::size_t max_wanted = 0;
  std::size_t max_indices = 0;
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(r) * fixed_bytes;
    max_payload = std::max<std::size_t>(max_payload, load_u32(fixed + kPayloadBytesAt));
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
  return max_payload;
}

// ---------------------------------------------------------------------------------------------
// Applying the records

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
    if (record_flags(fixed) != kFlagPending) return false;
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
  cache_.used(bit, cycle_number_);
  anyone_active_ = true;
  counters_.add(counters_.inline_allreduces, 1);
  complete_ok(op);
  return true;
}

void Engine::apply_records(const RecordLayout& layout, std::size_t max_payload, Clock::time_point now,
                           StallFailures& stalled) {
  anyone_active_ = false;
  ready_.clear();
  // First the names every rank sent as a cache bit in this very cycle (the steady state: the
  // same step everywhere): ready at once, one pass per name instead of one per rank and name.
  // Then everything else rank by rank. Both orders are the same on every rank.
  apply_everyone_bits(layout, now);
  const std::size_t cache_entries = cache_.size();
  for (int r = 0; r < size_; ++r) {
    const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(r) * layout.fixed_bytes;
    const auto peer_flags = record_flags(fixed);
    if (peer_flags & kFlagShutdown) shutdown_seen_[static_cast<std::size_t>(r)] = true;
    if (peer_flags & (kFlagShutdown | kFlagPending)) anyone_active_ = true;
    note_join(r, peer_flags);
    for_each_record_bit(layout, cache_entries, fixed, false, everyone_bits_.data(),
                        [&](std::size_t bit) { apply_shape(bit_entries_[bit], r, cache_.shape(bit), now); });
    if (layout.inline_bytes) {
      std::size_t used = 0;
      for_each_record_bit(layout, cache_entries, fixed, true, nullptr, [&](std::size_t bit) {
        const OpShape& d = cache_.shape(bit);
        const std::size_t padded = round_up(d.count * core::dtype_size(d.dtype), kInlineAlign);
        if (used + padded > layout.inline_bytes) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: inline data overflows its record");
        inline_sources_[bit * static_cast<std::size_t>(size_) + static_cast<std::size_t>(r)] = fixed + layout.inline_data_at + used;
        if (inline_ranks_[bit]++ == 0) inline_touched_.push_back(static_cast<int>(bit));
        used += padded;
      });
    }
    if (max_payload > 0) apply_payload(r, layout, max_payload, now, stalled);
  }
  if (joined_count_ > 0) ready_with_joined();
}

void Engine::apply_everyone_bits(const RecordLayout& layout, Clock::time_point now) {
  const std::size_t cache_entries = cache_.size();
  const std::size_t words = (cache_entries + 63) / 64;
  everyone_bits_.assign(words, 0);
  if (size_ == 1 || !cache_entries) return;
  if (!layout.listed) {
    for (std::size_t word = 0; word < words; ++word) {
      std::uint64_t all = ~std::uint64_t{0};
      for (int r = 0; r < size_ && all; ++r) {
        std::uint64_t w = 0;
        std::memcpy(&w, all_fixed_.data() + static_cast<std::size_t>(r) * layout.fixed_bytes + kFixedHeaderBytes + word * 8,
                    std::min<std::size_t>(8, layout.bit_bytes - word * 8));
        all &= w;
      }
      everyone_bits_[word] = all;
    }
  } else {
    // A bit every rank listed: counted, then the counts cleared (only the listed ones).
    for (int pass = 0; pass < 2; ++pass)
      for (int r = 0; r < size_; ++r)
        for_each_record_bit(layout, cache_entries, all_fixed_.data() + static_cast<std::size_t>(r) * layout.fixed_bytes, false,
                            nullptr, [&](std::size_t bit) {
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

void Engine::apply_payload(int rank, const RecordLayout& layout, std::size_t max_payload, Clock::time_point now,
                           StallFailures& stalled) {
  const std::byte* fixed = all_fixed_.data() + static_cast<std::size_t>(rank) * layout.fixed_bytes;
  Reader reader(all_payload_.data() + static_cast<std::size_t>(rank) * max_payload, load_u32(fixed + kPayloadBytesAt));
  while (reader.more()) {
    const auto type = reader.u8();
    if (type == kRecordDescription) {
      Description d = read_description(reader);
      apply_shape(entry_for_name(d.name), rank, d.shape, now);
    } else if (type == kRecordCachedBits) {
      // Cache bits that did not fit this rank's list.
      for (std::uint32_t n = reader.u32(); n > 0; --n) {
        const std::size_t bit = checked_bit(reader.u32(), cache_.size());
        apply_shape(bit_entries_[bit], rank, cache_.shape(bit), now);
      }
    } else if (type == kRecordStallFailure) {
      std::string name = reader.str();
      std::string message = reader.str();
      stalled.emplace_back(std::move(name), std::move(message));
    } else {
      throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: unknown negotiation record");
    }
  }
}

}  // namespace ringrun::engine
