// libFuzzer target: the collective header a TCP peer sends before every collective. Any 32 bytes
// decode to a valid header or are refused; a decoded header describes itself, compares, and
// encodes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/tcp/op_header_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringrun::core;
  if (size < kOpHeaderBytes) return 0;
  OpHeader header;
  if (!decode_op_header(data, &header)) return 0;
  if (header.describe().empty()) std::abort();
  OpHeader mine;
  mine.kind = header.kind;
  mine.seq = header.seq;
  (void)header.matches(mine);
  (void)mine.matches(header);
  unsigned char again[kOpHeaderBytes];
  encode_op_header(header, again);
  OpHeader round_trip;
  if (!decode_op_header(again, &round_trip)) std::abort();
  if (round_trip.seq != header.seq || round_trip.count != header.count || round_trip.root != header.root ||
      round_trip.kind != header.kind || round_trip.dtype != header.dtype || round_trip.op != header.op)
    std::abort();
  return 0;
}
