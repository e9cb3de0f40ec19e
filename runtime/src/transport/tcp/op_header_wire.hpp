// The 32-byte wire form of an OpHeader, as TCP peers exchange it before every collective:
// {magic 'RRH1' u32, kind u8, dtype u8, op u8, pad u8, root u32, seq u64, count u64}, little-endian.
#pragma once

#include <cstddef>

#include "core/world.hpp"

namespace ringrun::core {

inline constexpr std::size_t kOpHeaderBytes = 32;

void encode_op_header(const OpHeader& header, unsigned char* out);
// False when the bytes are not a header a ringrun peer sends: wrong magic, or a kind, dtype or op
// outside the enums (the fields are then never stored in *header as enum values).
bool decode_op_header(const unsigned char* in, OpHeader* header);

}  // namespace ringrun::core
