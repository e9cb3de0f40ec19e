// The negotiation record's format (negotiation_record.hpp): layout, growth rules, payload codec.
#include "engine/negotiation_record.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

using core::Collective;

Dims Dims::of(const std::int64_t* dims, int ndim) {
  Dims out;
  if (!dims || ndim <= 0) return out;
  out.ndim = static_cast<std::uint8_t>(std::min(ndim, 255));
  for (int i = 0; i < ndim; ++i) {
    const std::size_t at = std::min<std::size_t>(static_cast<std::size_t>(i), kMaxDims - 1);
    out.d[at] = i < static_cast<int>(kMaxDims) ? dims[i] : out.d[at] * dims[i];
  }
  return out;
}

bool Dims::same_rows(const Dims& other) const {
  if (ndim != other.ndim) return false;
  for (std::size_t i = 1; i < kept(); ++i)
    if (d[i] != other.d[i]) return false;
  return true;
}

std::string Dims::describe(std::uint64_t count) const {
  if (ndim == 0) return fmt::format("of {}", count);
  std::string out = "[";
  for (std::size_t i = 0; i < kept(); ++i) out += fmt::format("{}{}", i ? ", " : "", d[i]);
  if (ndim > kMaxDims) out += fmt::format(" (the last {} dimensions multiplied)", ndim - kMaxDims + 1);
  return out + "]";
}

bool OpShape::agrees_with(const OpShape& o) const {
  if (!varying) return *this == o;
  return kind == o.kind && dtype == o.dtype && op == o.op && root == o.root && cacheable == o.cacheable &&
         routed == o.routed && varying == o.varying && dims.same_rows(o.dims);
}

std::string OpShape::describe() const {
  // "allreduce float32 sum [2, 3]", "broadcast int32 [4] from root 1", "barrier".
  const core::CollectiveRow& row = core::collective_row(kind);
  if (row.agree == 0) return row.name;
  std::string text = fmt::format("{} {}", row.name, core::dtype_name(dtype));
  if (row.agree & RINGRUN_AGREE_OP) text += fmt::format(" {}", core::op_name(op));
  text += " " + dims.describe(count);
  if (row.agree & RINGRUN_AGREE_ROOT) text += fmt::format(" from root {}", root);
  return text;
}

void throw_bad_cache_bit(std::uint32_t bit, std::size_t cache_entries) {
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("engine: a negotiation record names cache bit {} of {}", bit, cache_entries));
}

std::size_t next_inline_area(std::size_t area, std::size_t wanted, std::size_t capacity) {
  if (wanted > area) {
    std::size_t grown = kInlineAlign;
    while (grown < wanted) grown *= 2;
    return std::min(grown, capacity);
  }
  if (wanted * 4 < area && area > kInlineAlign) return area / 2;
  return area;
}

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

void Reader::raw(void* p, std::size_t n) {
  if (pos_ + n > size_) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: truncated negotiation record");
  std::memcpy(p, data_ + pos_, n);
  pos_ += n;
}

void write_description(Writer& payload, const std::string& name, const OpShape& shape) {
  payload.u8(kRecordDescription);
  payload.str(name);
  payload.u8(static_cast<std::uint8_t>(shape.kind));
  payload.u8(static_cast<std::uint8_t>(shape.dtype));
  payload.u8(static_cast<std::uint8_t>(shape.op));
  payload.u8(shape.cacheable ? (shape.routed ? kCacheRouted : kCacheProgram) : kCacheNone);
  payload.u32(static_cast<std::uint32_t>(shape.root));
  payload.u64(shape.count);
  payload.u8(shape.varying ? 1 : 0);
  payload.u8(shape.dims.ndim);
  for (std::size_t i = 0; i < shape.dims.kept(); ++i) payload.u64(static_cast<std::uint64_t>(shape.dims.d[i]));
}

Description read_description(Reader& payload) {
  Description d;
  d.name = payload.str();
  const std::uint8_t kind = payload.u8();
  if (core::find_collective(kind) == nullptr)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: an unknown collective in a negotiation record");
  d.shape.kind = static_cast<Collective>(kind);
  d.shape.dtype = static_cast<ringrun_dtype>(payload.u8());
  d.shape.op = static_cast<ringrun_op>(payload.u8());
  const std::uint8_t cache_room = payload.u8();
  if (cache_room > kCacheRouted) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: unknown cache room in a negotiation record");
  d.shape.cacheable = cache_room != kCacheNone;
  d.shape.routed = cache_room == kCacheRouted;
  d.shape.root = static_cast<std::int32_t>(payload.u32());
  d.shape.count = payload.u64();
  const std::uint8_t varying = payload.u8();
  if (varying > 1) throw RuntimeError(RINGRUN_ERR_INTERNAL, "engine: a malformed description in a negotiation record");
  d.shape.varying = varying == 1;
  d.shape.dims.ndim = payload.u8();
  for (std::size_t i = 0; i < d.shape.dims.kept(); ++i) d.shape.dims.d[i] = static_cast<std::int64_t>(payload.u64());
  return d;
}

void write_stall_failure(Writer& payload, const std::string& name, const std::string& message) {
  payload.u8(kRecordStallFailure);
  payload.str(name);
  payload.str(message);
}

void write_cached_bits(Writer& payload, const std::uint32_t* bits, std::size_t n) {
  payload.u8(kRecordCachedBits);
  payload.u32(static_cast<std::uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) payload.u32(bits[i]);
}

}  // namespace ringrun::engine
