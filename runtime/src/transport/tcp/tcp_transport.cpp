#include "transport/tcp/tcp_transport.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/net.hpp"
#include "ringrun/runtime.hpp"
#include "transport/tcp/op_header_wire.hpp"

namespace ringrun::core {
namespace {

constexpr std::size_t kHeaderBytes = kOpHeaderBytes;

// Element range of segment i when count elements are split over n segments (first ones larger).
struct Range {
  std::size_t begin, size;
};
Range segment(std::size_t count, int n, int i) {
  std::size_t base = count / n, extra = count % n;
  std::size_t ui = static_cast<std::size_t>(i);
  return {ui * base + std::min(ui, extra), base + (ui < extra ? 1 : 0)};
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// transfer(peer, data, len) cut into `pieces` contiguous pieces of whole `unit`s, piece k on stream
// k, written to out[0 .. streams); slots past `pieces` get empty transfers with the same peer (so
// the slot layout does not depend on the size, and no other peer looks involved).
template <typename Make>
void stripe(Transfer* out, int streams, int pieces, std::size_t units, std::size_t unit, Make&& make) {
  for (int k = 0; k < streams; ++k) {
    Range piece = k < pieces ? segment(units, pieces, k) : Range{0, 0};
    out[k] = make(k, piece.begin * unit, piece.size * unit);
    out[k].stream = k;
  }
}

}  // namespace

int TcpTransport::stripes(std::size_t bytes) const {
  return static_cast<int>(
      std::clamp<std::size_t>(bytes / kMinStripeBytes, 1, static_cast<std::size_t>(mesh_.streams())));
}

void TcpTransport::check_headers(const OpHeader& header) {
  if (doubles()) return doubling(header, nullptr, nullptr, 0);
  send_and_check_headers(header, nullptr, 0, nullptr);
}

void TcpTransport::exchange_headers(const OpHeader& header, const void* extra, std::size_t extra_bytes,
                                    char* extra_in) {
  if (doubles() && extra_bytes == 0) return headers_checked_elsewhere_ ? void() : doubling(header, nullptr, nullptr, 0);
  if (!headers_checked_elsewhere_) return send_and_check_headers(header, extra, extra_bytes, extra_in);
  // Only the extra data (the direct allreduce's): every rank agrees on its size.
  std::vector<Transfer> transfers;
  for (int index = 0; extra_bytes && index < group_.size(); ++index) {
    if (index == group_.index) continue;
    transfers.push_back(send_to(peer(index), extra, extra_bytes));
    transfers.push_back(recv_from(peer(index), extra_in + extra_bytes * index, extra_bytes));
  }
  if (!transfers.empty()) mesh_.run(transfers, collective_name(header.kind));
}

void TcpTransport::send_and_check_headers(const OpHeader& header, const void* extra, std::size_t extra_bytes,
                                          char* extra_in) {
  const World& world = mesh_.world();
  const int n = group_.size();
  unsigned char mine[kHeaderBytes];
  encode_op_header(header, mine);
  std::vector<unsigned char> theirs(kHeaderBytes * n);
  std::vector<Transfer> transfers;
  transfers.reserve(4 * n);
  const char* what = collective_name(header.kind);
  // A mismatch is only thrown once this rank's header has reached every peer (so every rank sees
  // it) and every peer's header is here; the peers' data may never come, so the run stops as soon
  // as that is the case. Waiting for every header means every peer has finished the collective
  // before: the peers that throw here and close cannot look like a death to a rank that is still
  // in it (a hierarchical collective ends at different times on different hosts).
  int mismatched_peer = -1;
  int headers_in = 0;
  std::vector<std::size_t> extra_transfers;  // indices in transfers
  std::vector<std::size_t> header_sends;     // indices in transfers of the sends that carry `mine`
  // The header and the data behind it leave in one send, so one segment: with TCP_NODELAY two
  // sends are two segments and the receiver may wake for each (a 4-byte allreduce between two
  // namespace hosts: 18-20 -> 14-16 us).
  if (extra_bytes) {
    outgoing_.resize(kHeaderBytes + extra_bytes);
    std::memcpy(outgoing_.data(), mine, kHeaderBytes);
    std::memcpy(outgoing_.data() + kHeaderBytes, extra, extra_bytes);
  }
  bool malformed = false;  // the peer's bytes are not a header at all
  OpHeader mismatched;
  for (int index = 0; index < n; ++index) {
    if (index == group_.index) continue;
    const int peer = this->peer(index);
    header_sends.push_back(transfers.size());
    if (extra_bytes) {
      transfers.push_back(send_to(peer, outgoing_.data(), outgoing_.size()));
    } else {
      transfers.push_back(send_to(peer, mine, kHeaderBytes));
    }
    unsigned char* slot = theirs.data() + kHeaderBytes * index;
    // Check each header as soon as it is complete: a peer with a smaller count would otherwise
    // leave us waiting for data it never sends.
    transfers.push_back(recv_from(peer, slot, kHeaderBytes, [&, peer, slot](std::size_t done) {
                           if (done == kHeaderBytes) ++headers_in;
                           if (done == kHeaderBytes && mismatched_peer < 0) {
                             OpHeader other;
                             malformed = !decode_op_header(slot, &other);
                             if (malformed || !header.matches(other)) {
                               mismatched_peer = peer;
                               mismatched = other;
                               // The data behind the headers no longer matters, and the peers may
                               // send less than ours and close: stop moving it either way.
                               for (std::size_t i : extra_transfers) transfers[i].len = transfers[i].done;
                               for (std::size_t i : header_sends)
                                 transfers[i].len = std::max(transfers[i].done, kHeaderBytes);
                             }
                           }
                           return done;
                         }));
    if (extra_bytes) {
      extra_transfers.push_back(transfers.size());
      transfers.push_back(recv_from(peer, extra_in + extra_bytes * index, extra_bytes));
    }
  }
  mesh_.run(transfers, what, [&] {
    if (mismatched_peer < 0 || headers_in < n - 1) return false;
    for (std::size_t i : header_sends)
      if (transfers[i].done < kHeaderBytes) return false;
    return true;
  });
  if (mismatched_peer >= 0 && malformed)
    throw ringrun::RuntimeError(RINGRUN_ERR_PEER, fmt::format("{}: rank {} received a malformed collective header from {}",
                                                     what, world.rank, world.describe(mismatched_peer)));
  if (mismatched_peer >= 0) throw_mismatch(world, header, mismatched_peer, mismatched);
}

void TcpTransport::barrier(const OpHeader& header) { exchange_headers(header, nullptr, 0, nullptr); }

void TcpTransport::allreduce(const OpHeader& header, const void* send_ptr, void* recv_ptr) {
  const int n = group_.size();
  const std::size_t bytes = header.bytes();
  const auto* send = static_cast<const char*>(send_ptr);
  auto* recv = static_cast<char*>(recv_ptr);
  if (bytes <= kDirectMaxBytes || header.count < static_cast<std::uint64_t>(n)) {
    if (doubles()) return doubling(header, send, recv, bytes);
    // Direct: everyone's data to everyone, reduced here in rank order, so every rank computes
    // bit-identical results.
    if (scratch_.size() < bytes * n) scratch_.resize(bytes * n);
    char* all = scratch_.data();
    // own copy: recv may alias send (none for count 0: the buffers may then be null)
    if (bytes) std::memcpy(all + bytes * group_.index, send, bytes);
    exchange_headers(header, send, bytes, all);
    if (bytes == 0) return;
    reduce(recv, all, all + bytes, header.count, header.dtype, header.op);
    for (int r = 2; r < n; ++r) reduce(recv, recv, all + bytes * r, header.count, header.dtype, header.op);
    if (header.op == RINGRUN_AVERAGE) finish_average(recv, header.count, header.dtype, n);
    return;
  }
  exchange_headers(header, nullptr, 0, nullptr);
  const std::size_t esize = dtype_size(header.dtype);
  const std::size_t piece = (kMaxSegmentBytes / esize) * n;
  for (std::size_t begin = 0; begin < header.count; begin += piece) {
    std::size_t count = std::min(piece, header.count - begin);
    ring_allreduce(header, send + begin * esize, recv + begin * esize, count);
  }
}

void TcpTransport::ring_allreduce(const OpHeader& header, const char* send, char* recv, std::size_t count) {
  const int n = group_.size(), r = group_.index;
  const int next = peer(mod(r + 1, n)), prev = peer(mod(r - 1, n));
  const std::size_t esize = dtype_size(header.dtype);
  const ringrun_dtype dtype = header.dtype;
  const ringrun_op op = header.op;
  const int streams = mesh_.streams();
  // Each stream receives its pieces into its own part of the scratch (the streams progress
  // independently), as large as the largest piece of any segment (segments differ by one element).
  std::size_t stride = 0;
  for (int i : {0, n - 1}) {
    const std::size_t m = segment(count, n, i).size;
    stride = std::max(stride, segment(m, stripes(m * esize), 0).size * esize);
  }
  if (scratch_.size() < stride * streams) scratch_.resize(stride * streams);
  char* scratch = scratch_.data();

  // One poll loop runs all 2(n-1) steps. Reduce-scatter step s sends segment r-s and receives
  // segment r-s-1 (reduced into recv as it arrives); step s+1 forwards that segment as soon as
  // its bytes are reduced. Allgather step s sends segment r+1-s (the one this rank owns first)
  // and receives segment r-s directly into recv. Every step is striped over the streams; piece k
  // of a step depends on piece k of the step before (the same segment, so the same pieces).
  const int steps = n - 1;
  std::vector<Transfer> t(4 * steps * streams);
  auto rs_send = [&](int s) { return &t[static_cast<std::size_t>(s * streams)]; };
  auto rs_recv = [&](int s) { return &t[static_cast<std::size_t>((steps + s) * streams)]; };
  auto ag_send = [&](int s) { return &t[static_cast<std::size_t>((2 * steps + s) * streams)]; };
  auto ag_recv = [&](int s) { return &t[static_cast<std::size_t>((3 * steps + s) * streams)]; };
  for (int s = 0; s < steps; ++s) {
    Range out = segment(count, n, mod(r - s, n));
    Range in = segment(count, n, mod(r - s - 1, n));
    const char* out_base = (s == 0 ? send : recv) + out.begin * esize;
    stripe(rs_send(s), streams, stripes(out.size * esize), out.size, esize,
           [&](int k, std::size_t at, std::size_t len) {
             Transfer x = send_to(next, out_base + at, len);
             if (s > 0) x.available = &rs_recv(s - 1)[k].ready;
             return x;
           });
    const bool last = s == steps - 1;
    // Reduce whole elements as they arrive: recv[seg] = send[seg] (op) incoming.
    stripe(rs_recv(s), streams, stripes(in.size * esize), in.size, esize, [&](int k, std::size_t at, std::size_t len) {
      char* landing = scratch + stride * k;
      const std::size_t first = in.begin * esize + at;  // the piece's offset in the buffers
      return recv_from(prev, landing, len, [=, reduced = std::size_t{0}](std::size_t done) mutable {
        std::size_t whole = done / esize;
        if (whole > reduced) {
          std::size_t where = first + reduced * esize;
          reduce(recv + where, send + where, landing + reduced * esize, whole - reduced, dtype, op);
          if (last && op == RINGRUN_AVERAGE) finish_average(recv + where, whole - reduced, dtype, n);
          reduced = whole;
        }
        return reduced * esize;
      });
    });
    Range ag_out = segment(count, n, mod(r + 1 - s, n));
    Range ag_in = segment(count, n, mod(r - s, n));
    stripe(ag_send(s), streams, stripes(ag_out.size * esize), ag_out.size, esize,
           [&](int k, std::size_t at, std::size_t len) {
             return send_to(next, recv + ag_out.begin * esize + at, len,
                            s == 0 ? &rs_recv(steps - 1)[k].ready : &ag_recv(s - 1)[k].ready);
           });
    stripe(ag_recv(s), streams, stripes(ag_in.size * esize), ag_in.size, esize,
           [&](int, std::size_t at, std::size_t len) {
             return recv_from(prev, recv + ag_in.begin * esize + at, len);
           });
  }
  mesh_.run(t, collective_name(header.kind));
}

void TcpTransport::broadcast(const OpHeader& header, void* buf_ptr) {
  exchange_headers(header, nullptr, 0, nullptr);
  const int n = group_.size(), r = group_.index;
  const std::size_t bytes = header.bytes();
  if (bytes == 0) return;
  // A pipelined chain root -> root+1 -> ... (root: an index into the group): each rank forwards
  // bytes as they arrive.
  const int position = mod(r - header.root, n);
  auto* buf = static_cast<char*>(buf_ptr);
  const int streams = mesh_.streams(), pieces = stripes(bytes);
  const bool receives = position != 0, sends = position != n - 1;  // the root only sends, the last only receives
  std::vector<Transfer> t(2 * streams);
  Transfer* in = t.data();
  Transfer* out = t.data() + streams;
  if (receives)
    stripe(in, streams, pieces, bytes, 1, [&](int, std::size_t at, std::size_t len) {
      return recv_from(peer(mod(r - 1, n)), buf + at, len);
    });
  if (sends)
    stripe(out, streams, pieces, bytes, 1, [&](int k, std::size_t at, std::size_t len) {
      return send_to(peer(mod(r + 1, n)), buf + at, len, receives ? &in[k].ready : nullptr);
    });
  mesh_.run(std::span(t).subspan(receives ? 0 : streams, (receives && sends) ? 2 * streams : streams), "broadcast");
}

void TcpTransport::allgather(const OpHeader& header, const void* send, void* recv) {
  exchange_headers(header, nullptr, 0, nullptr);
  allgather_ring(header, send, recv);
}

void TcpTransport::allgather_ring(const OpHeader& header, const void* send, void* recv_ptr) {
  const int n = group_.size(), r = group_.index;
  const std::size_t block = header.bytes();
  auto* recv = static_cast<char*>(recv_ptr);
  if (block == 0) return;
  std::memmove(recv + block * r, send, block);
  // Ring: step s sends block r-s (received in step s-1, forwarded as it arrives), receives r-s-1;
  // each block striped over the streams, piece k forwarded as piece k of the step before arrives.
  const int streams = mesh_.streams(), pieces = stripes(block);
  std::vector<Transfer> t(2 * (n - 1) * streams);
  auto sends = [&](int s) { return &t[static_cast<std::size_t>(s * streams)]; };
  auto recvs = [&](int s) { return &t[static_cast<std::size_t>((n - 1 + s) * streams)]; };
  for (int s = 0; s < n - 1; ++s) {
    char* out = recv + block * mod(r - s, n);
    char* in = recv + block * mod(r - s - 1, n);
    stripe(sends(s), streams, pieces, block, 1, [&](int k, std::size_t at, std::size_t len) {
      return send_to(peer(mod(r + 1, n)), out + at, len, s > 0 ? &recvs(s - 1)[k].ready : nullptr);
    });
    stripe(recvs(s), streams, pieces, block, 1, [&](int, std::size_t at, std::size_t len) {
      return recv_from(peer(mod(r - 1, n)), in + at, len);
    });
  }
  mesh_.run(t, "allgather");
}

}  // namespace ringrun::core
