// Recursive doubling over the TCP mesh (see TcpTransport::doubling): the header check of every
// collective in groups of kDoublingMinRanks or more, and their small allreduces.
#include <cstring>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/net.hpp"
#include "ringrun/runtime.hpp"
#include "transport/tcp/op_header_wire.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace ringrun::core {
namespace {

// What one step sends: the sender's header, the first disagreement its side has seen (if any),
// and how many data bytes follow. {header 32, has_record u32, rank_a u32, rank_b u32, pad u32,
// header_a 32, header_b 32, data_bytes u64}, little-endian.
constexpr std::size_t kPreambleBytes = 3 * kOpHeaderBytes + 4 * 4 + 8;

struct Preamble {
  OpHeader header;
  HeaderVerdict verdict;
  std::uint64_t data_bytes = 0;
};

void encode_preamble(const Preamble& p, unsigned char* out) {
  std::memset(out, 0, kPreambleBytes);
  encode_op_header(p.header, out);
  net::put_u32(out + kOpHeaderBytes, p.verdict.disagree ? 1 : 0);
  net::put_u32(out + kOpHeaderBytes + 4, static_cast<std::uint32_t>(p.verdict.rank_a));
  net::put_u32(out + kOpHeaderBytes + 8, static_cast<std::uint32_t>(p.verdict.rank_b));
  if (p.verdict.disagree) {
    encode_op_header(p.verdict.a, out + kOpHeaderBytes + 16);
    encode_op_header(p.verdict.b, out + 2 * kOpHeaderBytes + 16);
  }
  net::put_u64(out + 3 * kOpHeaderBytes + 16, p.data_bytes);
}

// False when the bytes are no preamble a ringrun peer sends.
bool decode_preamble(const unsigned char* in, int ranks, Preamble* p) {
  if (!decode_op_header(in, &p->header)) return false;
  const std::uint32_t flag = net::get_u32(in + kOpHeaderBytes);
  if (flag > 1) return false;
  p->verdict.disagree = flag == 1;
  p->data_bytes = net::get_u64(in + 3 * kOpHeaderBytes + 16);
  if (p->data_bytes != 0 && p->data_bytes != p->header.bytes()) return false;
  if (!p->verdict.disagree) return true;
  p->verdict.rank_a = static_cast<int>(net::get_u32(in + kOpHeaderBytes + 4));
  p->verdict.rank_b = static_cast<int>(net::get_u32(in + kOpHeaderBytes + 8));
  return p->verdict.rank_a >= 0 && p->verdict.rank_a < ranks && p->verdict.rank_b >= 0 && p->verdict.rank_b < ranks &&
         decode_op_header(in + kOpHeaderBytes + 16, &p->verdict.a) &&
         decode_op_header(in + 2 * kOpHeaderBytes + 16, &p->verdict.b);
}

}  // namespace

// One step with the group member at `index`: sends (if send) this rank's header, verdict and, while
// no disagreement is known, `bytes` of `data`; receives (if receive) the same from it, merges its
// verdict and returns its data (null when it sent none).
const char* TcpTransport::doubling_step(const OpHeader& header, int index, bool send, bool receive, const char* data,
                                        std::size_t bytes, HeaderVerdict& verdict) {
  const World& world = mesh_.world();
  const char* what = collective_name(header.kind);
  const int partner = peer(index);
  std::vector<Transfer> transfers;
  transfers.reserve(3);
  if (send) {
    const std::size_t data_bytes = verdict.disagree ? 0 : bytes;
    outgoing_.resize(kPreambleBytes + data_bytes);
    encode_preamble({header, verdict, data_bytes}, reinterpret_cast<unsigned char*>(outgoing_.data()));
    if (data_bytes) std::memcpy(outgoing_.data() + kPreambleBytes, data, data_bytes);
    transfers.push_back(send_to(partner, outgoing_.data(), outgoing_.size()));
  }
  // The data's length is in the preamble: the data transfer grows to it once the preamble is in,
  // in the same run as the send (a run that waited for the send first could deadlock two partners
  // whose messages both exceed the socket buffers).
  unsigned char in[kPreambleBytes];
  Preamble theirs;
  bool malformed = false;
  if (receive) {
    transfers.push_back(recv_from(partner, in, kPreambleBytes, [&](std::size_t done) {
      if (done < kPreambleBytes) return done;
      malformed = !decode_preamble(in, world.size, &theirs);
      if (!malformed && theirs.data_bytes) {
        if (scratch_.size() < theirs.data_bytes) scratch_.resize(theirs.data_bytes);
        Transfer& data_in = transfers.back();  // reserved below: no reallocation
        data_in.data = scratch_.data();
        data_in.len = theirs.data_bytes;  // read even when unused, so the connection stays in step
      }
      return done;
    }));
    transfers.push_back(recv_from(partner, nullptr, 0));
  }
  mesh_.run_pairwise(transfers, what);
  if (!receive) return nullptr;
  if (malformed)
    throw RuntimeError(RINGRUN_ERR_PEER, fmt::format("{}: rank {} received a malformed collective header from {}", what,
                                                     world.rank, world.describe(partner)));
  if (!verdict.disagree) {
    if (theirs.verdict.disagree) {
      verdict = theirs.verdict;
    } else if (!header.matches(theirs.header)) {
      verdict = {true, world.rank, partner, header, theirs.header};
    }
  }
  if (verdict.disagree || bytes == 0) return nullptr;
  if (theirs.data_bytes != bytes)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: {} sent {} bytes for the same call, {} expected", what,
                                                         world.describe(partner), theirs.data_bytes, bytes));
  return scratch_.data();
}

// Recursive doubling among the group's p = 2^k <= n first members; member p + j (when n is no
// power of two) first hands its part to member j and gets the result back from it at the end.
// Every message carries the sender's header and the first disagreement its side has seen, so after
// the log2 p rounds every rank has compared, through the merges, every rank's header: all of them
// throw the mismatch, or none does. Each merge reduces the lower member's part first, so every
// rank combines the same operands in the same order (bit-identical results, even for MIN of +0 and
// -0). bytes 0: headers only (a barrier, or the check before a ring or a broadcast).
void TcpTransport::doubling(const OpHeader& header, const void* send, void* recv, std::size_t bytes,
                            const HeaderVerdict& seed, int divisor) {
  const int n = group_.size(), i = group_.index;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  auto* acc = static_cast<char*>(recv);
  if (bytes && acc != send) std::memcpy(acc, send, bytes);
  HeaderVerdict verdict = seed;
  auto combine = [&](const char* theirs, bool mine_first) {
    if (!theirs) return;
    if (mine_first) reduce(acc, acc, theirs, header.count, header.dtype, header.op);
    else reduce(acc, theirs, acc, header.count, header.dtype, header.op);
  };
  if (i >= p) {
    doubling_step(header, i - p, true, false, acc, bytes, verdict);
    const char* result = doubling_step(header, i - p, false, true, nullptr, bytes, verdict);
    if (result) std::memcpy(acc, result, bytes);
  } else {
    if (i + p < n) combine(doubling_step(header, i + p, false, true, nullptr, bytes, verdict), true);
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = i ^ mask;
      combine(doubling_step(header, partner, true, true, acc, bytes, verdict), i < partner);
    }
    if (bytes && !verdict.disagree && header.op == RINGRUN_AVERAGE)
      finish_average(acc, header.count, header.dtype, divisor ? divisor : n);
    if (i + p < n) doubling_step(header, i + p, true, false, acc, bytes, verdict);
  }
  if (verdict.disagree) throw_mismatch(mesh_.world(), header, verdict);
}

}  // namespace ringrun::core
