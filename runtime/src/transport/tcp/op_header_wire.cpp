#include "transport/tcp/op_header_wire.hpp"

#include <cstring>

#include "ringrun/net.hpp"

namespace ringrun::core {
namespace {

constexpr std::uint32_t kHeaderMagic = 0x31485252;  // "RRH1"

}  // namespace

void encode_op_header(const OpHeader& h, unsigned char* out) {
  std::memset(out, 0, kOpHeaderBytes);
  net::put_u32(out, kHeaderMagic);
  out[4] = static_cast<unsigned char>(h.kind);
  out[5] = static_cast<unsigned char>(h.dtype);
  out[6] = static_cast<unsigned char>(h.op);
  net::put_u32(out + 8, static_cast<std::uint32_t>(h.root));
  net::put_u64(out + 16, h.seq);
  net::put_u64(out + 24, h.count);
}

bool decode_op_header(const unsigned char* in, OpHeader* h) {
  if (net::get_u32(in) != kHeaderMagic) return false;
  // Range checks before the casts: an out-of-range value loaded as an enum is undefined behaviour.
  const unsigned kind = in[4], dtype = in[5], op = in[6];
  if (kind < static_cast<unsigned>(Collective::allreduce) || kind > static_cast<unsigned>(Collective::reducescatter))
    return false;
  if (dtype > static_cast<unsigned>(RINGRUN_BOOL) || op > static_cast<unsigned>(RINGRUN_ADASUM)) return false;
  h->kind = static_cast<Collective>(kind);
  h->dtype = static_cast<ringrun_dtype>(dtype);
  h->op = static_cast<ringrun_op>(op);
  h->root = static_cast<std::int32_t>(net::get_u32(in + 8));
  h->seq = net::get_u64(in + 16);
  h->count = net::get_u64(in + 24);
  return true;
}

}  // namespace ringrun::core
