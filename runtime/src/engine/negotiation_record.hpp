// The negotiation record: what each rank sends every cycle, byte by byte. This file is the one
// definition of the format; the engine's writers (negotiation.cpp: the general writer and the
// lone op's direct writer) and its reader use only what is declared here.
//
// Owns: the wire layout (RecordLayout, the header's offsets, flags, payload entry types), the
// codec of payload entries (Writer, Reader, descriptions), the growth rules of the variable parts
// (next_inline_area, next_index_slots). Touches nothing else: pure functions of their arguments.
//
// A cycle exchanges, per rank, in rank order on every rank:
//
//   1. The fixed part (allgather of RecordLayout::fixed_bytes, the same size on every rank):
//        offset  0  u32  payload bytes this rank sends in step 2 (0 on every rank: no step 2)
//        offset  4  u8   flags: kFlagShutdown (ringrun_finalize called), kFlagPending (ops pending here),
//                        kFlagJoined (this rank called join and waits for the others to)
//        offset  5  3 spare bytes (zero)
//        offset  8  u32  inline bytes this rank wanted to send (sizes the next cycle's inline area)
//        offset 12  u32  cache indices this rank wanted to list (sizes the next cycle's list)
//        offset 16  u32  listed records only: submitted cache bits listed
//        offset 20  u32  listed records only: inline cache bits listed
//        offset 24  the cache bits, in one of two forms (RecordLayout::listed, the same on every rank):
//                   bit vectors: one of bit_bytes for the names submitted as cache bits, then
//                     (with an inline area) one for the names whose data is inline;
//                   index lists: `slots` u32 cache indices, the submitted ones first, then the
//                     inline ones (what does not fit goes in the payload as kRecordCachedBits);
//        inline_data_at  the inline area (inline_bytes): the inputs of the small cached
//                   allreduces named by the inline bits, in cache-bit order (vectors) or list
//                   order, each padded to kInlineAlign.
//   2. The payload (allgather of the largest payload, each padded with zeros), only when some
//      rank has one: a sequence of entries, each a u8 RecordType then its fields:
//        kRecordDescription   str name, u8 kind, u8 dtype, u8 op, u8 CacheRoom, u32 root, u64 count,
//                             u8 varying, u8 ndim, then min(ndim, Dims::kMaxDims) u64 dims
//        kRecordStallFailure  str name, str message (rank 0 only: a stall shutdown it decided)
//        kRecordCachedBits    u32 n, then n u32 cache bits (submitted bits past the list's slots)
//      (str: u32 length, then the bytes; all integers little-endian as the hosts are.)
//
// Every rank computes the next cycle's layout from the same gathered headers (the largest wants),
// so the layouts agree without a round trip.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace ringrun::engine {

// A tensor's shape as its framework has it, for the checks and messages that name shapes: up to
// kMaxDims dimensions kept (more fold into the last one kept, as their product); ndim 0: a flat
// buffer of `count` elements (the C API's plain calls).
struct Dims {
  static constexpr std::size_t kMaxDims = 8;
  std::uint8_t ndim = 0;
  std::array<std::int64_t, kMaxDims> d{};

  static Dims of(const std::int64_t* dims, int ndim);
  std::size_t kept() const { return std::min<std::size_t>(ndim, kMaxDims); }
  bool operator==(const Dims&) const = default;
  // The dimensions past the first (the shape of a row), equal: what an allgather or alltoall of
  // different first dimensions needs.
  bool same_rows(const Dims& other) const;
  std::string describe(std::uint64_t count) const;  // "[17, 3]", or "of 51" when ndim is 0
};

// What a rank says about a name, apart from the name itself (no pointers): ranks must agree on it.
struct OpShape {
  core::Collective kind = core::Collective::allreduce;
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  ringrun_op op = RINGRUN_SUM;
  std::int32_t root = 0;
  std::uint64_t count = 0;
  bool cacheable = true;
  bool routed = false;  // OpRequest::routed: which room of the cache it takes
  // The count (first dimension) may differ per rank: an allgather whose output is allocated once
  // the counts are known, an alltoall.
  bool varying = false;
  Dims dims;

  bool operator==(const OpShape&) const = default;
  // What every rank must agree on: everything, except the count and first dimension of a varying op.
  bool agrees_with(const OpShape& other) const;
  std::string describe() const;  // "allreduce float32 sum of [17, 3]"
};

// A name with its shape: a kRecordDescription entry, and a response-cache entry.
struct Description {
  std::string name;
  OpShape shape;
};

// The fixed-size part of a negotiation record this cycle; the same on every rank. Cache bits go
// either as bit vectors (one bit per cache entry: what a step of hundreds of cached names needs)
// or, while every rank submits only a few names per cycle, as lists of u32 cache indices: a
// small op must not gather two bit vectors of a thousand-entry cache every cycle. Bits that do
// not fit a rank's list go in its payload (kRecordCachedBits), and the lists grow for the next
// cycle.
struct RecordLayout {
  bool listed = false;           // index lists, not bit vectors
  std::size_t bit_bytes = 0;     // one bit vector
  std::size_t slots = 0;         // listed: u32 indices, submitted bits first, then inline bits
  std::size_t inline_bytes = 0;  // the inline data area
  std::size_t inline_bits_at = 0;  // bit vectors: where the inline bits start
  std::size_t inline_data_at = 0;
  std::size_t fixed_bytes = 0;
};

enum RecordType : std::uint8_t { kRecordDescription = 1, kRecordStallFailure = 2, kRecordCachedBits = 3 };
// A description's cache byte: which room of the response cache the name takes, if any.
enum CacheRoom : std::uint8_t { kCacheNone = 0, kCacheProgram = 1, kCacheRouted = 2 };
enum Flags : std::uint8_t { kFlagShutdown = 1, kFlagPending = 2, kFlagJoined = 4 };
inline constexpr std::size_t kPayloadBytesAt = 0;
inline constexpr std::size_t kFlagsAt = 4;
inline constexpr std::size_t kWantedAt = 8;
inline constexpr std::size_t kIndicesWantedAt = 12;
inline constexpr std::size_t kListedAt = 16;
inline constexpr std::size_t kListedInlineAt = 20;
inline constexpr std::size_t kFixedHeaderBytes = 24;  // where the cache bits start
inline constexpr std::size_t kInlineAlign = 16;      // each inline tensor starts aligned for any dtype
inline constexpr std::size_t kInlineMaxPending = 16;  // a rank with more pending ops sends no inline data
inline constexpr std::size_t kMinIndexSlots = 8;

// The fixed header's fields (the spare bytes stay zero).
struct RecordHeader {
  std::uint32_t payload_bytes = 0;
  std::uint8_t flags = 0;
  std::uint32_t inline_wanted = 0;
  std::uint32_t indices_wanted = 0;
  std::uint32_t listed = 0;         // listed records only
  std::uint32_t listed_inline = 0;  // listed records only
};
inline std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }

inline std::uint32_t load_u32(const std::byte* at) {
  std::uint32_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}
inline void store_u32(std::byte* at, std::uint32_t v) { std::memcpy(at, &v, sizeof v); }

// Into a zeroed record of `layout`; both writers end with it. (Inline: on a lone op's path.)
inline void write_header(std::byte* record, const RecordLayout& layout, const RecordHeader& header) {
  store_u32(record + kPayloadBytesAt, header.payload_bytes);
  record[kFlagsAt] = static_cast<std::byte>(header.flags);
  store_u32(record + kWantedAt, header.inline_wanted);
  store_u32(record + kIndicesWantedAt, header.indices_wanted);
  if (layout.listed) {
    store_u32(record + kListedAt, header.listed);
    store_u32(record + kListedInlineAt, header.listed_inline);
  }
}
inline std::uint8_t record_flags(const std::byte* record) { return static_cast<std::uint8_t>(record[kFlagsAt]); }

// A cache bit in a bit vector of the record (bit vector form).
inline void set_record_bit(std::byte* record, std::size_t vector_at, std::size_t bit) {
  record[vector_at + bit / 8] |= static_cast<std::byte>(1u << (bit % 8));
}
// A cache index in list slot `slot` (listed form).
inline void set_record_index(std::byte* record, std::size_t slot, std::size_t bit) {
  store_u32(record + kFixedHeaderBytes + slot * sizeof(std::uint32_t), static_cast<std::uint32_t>(bit));
}

[[noreturn]] void throw_bad_cache_bit(std::uint32_t bit, std::size_t cache_entries);
// A cache bit read from a peer's record: one the cache has, or the records are corrupt.
inline std::size_t checked_bit(std::uint32_t bit, std::size_t cache_entries) {
  if (bit >= cache_entries) throw_bad_cache_bit(bit, cache_entries);
  return bit;
}

// Calls f(bit) for every set bit of a bit vector of `bits` bits stored in (bits + 7) / 8 bytes,
// in increasing order, a 64-bit word at a time (a step of a thousand cached names is a few
// hundred nanoseconds here, not a lookup per name). skip: words of bits to leave out, or null.
template <typename F>
void for_each_set_bit(const std::byte* vector, std::size_t bits, const std::uint64_t* skip, F&& f) {
  const std::size_t bytes = (bits + 7) / 8;
  for (std::size_t word = 0; word * 64 < bits; ++word) {
    std::uint64_t w = 0;
    std::memcpy(&w, vector + word * 8, std::min<std::size_t>(8, bytes - word * 8));
    if (skip) w &= ~skip[word];
    while (w) {
      f(word * 64 + static_cast<std::size_t>(__builtin_ctzll(w)));
      w &= w - 1;
    }
  }
}

// Calls f(bit) for each cache bit a rank's record holds: what it submitted (inline_bits false) or
// sent inline data for, in the order of the record, bits set in skip left out.
template <typename F>
void for_each_record_bit(const RecordLayout& layout, std::size_t cache_entries, const std::byte* record, bool inline_bits,
                         const std::uint64_t* skip, F&& f) {
  if (!layout.listed) {
    for_each_set_bit(record + (inline_bits ? layout.inline_bits_at : kFixedHeaderBytes), cache_entries, skip, f);
    return;
  }
  const std::uint32_t submitted = load_u32(record + kListedAt);
  const std::uint32_t count = inline_bits ? load_u32(record + kListedInlineAt) : submitted;
  const std::byte* list = record + kFixedHeaderBytes + (inline_bits ? submitted : 0) * sizeof(std::uint32_t);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::size_t bit = checked_bit(load_u32(list + i * sizeof(std::uint32_t)), cache_entries);
    if (skip && (skip[bit / 64] >> (bit % 64) & 1)) continue;
    f(bit);
  }
}

// This cycle's layout: cache_entries bits (the same on every rank: the cache changes only after
// a cycle's agreement), the inline area and list slots the last cycle's records asked for.
RecordLayout record_layout(std::size_t cache_entries, std::size_t inline_area, std::size_t index_slots);
// The inline area of the next cycle's records: every rank computes it from the same records, so
// it is the same everywhere. It grows at once to what a rank wanted (a power of two, so that a
// size seen once keeps fitting) and shrinks by halves once it is four times more than anyone
// wants: one small tensor gathers a few dozen bytes per cycle, not the whole capacity.
std::size_t next_inline_area(std::size_t area, std::size_t wanted, std::size_t capacity);
// A slot count of the listed form follows what the ranks wanted, as the inline area does: at
// once up to a power of two, down by halves once four times more than anyone wants.
std::size_t next_index_slots(std::size_t slots, std::size_t wanted, std::size_t capacity);

// The payload's writer: appends fields.
class Writer {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(static_cast<std::byte>(v)); }
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) {
    auto b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<std::byte> bytes_;
};

// The payload's reader: a truncated entry throws RuntimeError (the records are corrupt).
class Reader {
 public:
  Reader(const std::byte* data, std::size_t size) : data_(data), size_(size) {}
  bool more() const { return pos_ < size_; }
  std::uint8_t u8() {
    std::uint8_t v;
    raw(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    std::string s(u32(), '\0');
    raw(s.data(), s.size());
    return s;
  }

 private:
  void raw(void* p, std::size_t n);
  const std::byte* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Payload entries: each writer puts the type byte first; each reader runs after the type byte.
void write_description(Writer& payload, const std::string& name, const OpShape& shape);
Description read_description(Reader& payload);
void write_stall_failure(Writer& payload, const std::string& name, const std::string& message);
void write_cached_bits(Writer& payload, const std::uint32_t* bits, std::size_t n);

}  // namespace ringrun::engine
