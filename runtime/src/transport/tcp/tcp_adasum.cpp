#include "transport/tcp/tcp_adasum.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"
#include "ringrun/net.hpp"

namespace ringrun::core {
namespace {

constexpr const char* kWhat = "allreduce (adasum)";

// The largest power of two <= n (n >= 1).
int power_of_two_below(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// How many of the n ranks the members [begin, end) of the p stand for: each itself, and member
// j < n - p rank p + j too.
int ranks_behind(int begin, int end, int n, int p) {
  return (end - begin) + std::max(0, std::min(end, n - p) - begin);
}

}  // namespace

void TcpAdasum::allreduce(const OpHeader& header, const void* send, void* recv) {
  const std::size_t bytes = header.bytes();
  auto* data = static_cast<char*>(recv);
  if (bytes && data != send) std::memcpy(data, send, bytes);
  const int n = mesh_.world().size, me = mesh_.world().rank;
  if (n == 1 || bytes == 0) return;
  const int p = power_of_two_below(n);
  if (me >= p) {
    // Hands the tensor to rank me - p, which combines it with its own, and waits for the result.
    exchange(me - p, data, bytes, nullptr, 0);
    exchange(me - p, nullptr, 0, data, bytes);
    return;
  }
  const std::size_t upper_half = header.count - header.count / 2;  // the most a halving step keeps
  const std::size_t need = (me < n - p ? header.count : upper_half) * dtype_size(header.dtype);
  if (scratch_.size() < need) scratch_.resize(need);
  fold_in(header, data, p);
  reduce_scatter(header, data, p);
  allgather(header, data, p);
  fold_out(header, data, p);
}

void TcpAdasum::fold_in(const OpHeader& header, char* data, int p) {
  const int n = mesh_.world().size, me = mesh_.world().rank;
  if (me >= n - p) return;  // no rank folds into this one
  exchange(me + p, nullptr, 0, scratch_.data(), header.bytes());
  // This rank holds both tensors whole: their sums need no exchange.
  const AdasumSums sums = adasum_sums(data, scratch_.data(), header.count, header.dtype);
  adasum_combine(data, scratch_.data(), header.count, header.dtype, adasum_weights(sums));
}

void TcpAdasum::fold_out(const OpHeader& header, char* data, int p) {
  const int n = mesh_.world().size, me = mesh_.world().rank;
  if (me < n - p) exchange(me + p, data, header.bytes(), nullptr, 0);
}

void TcpAdasum::reduce_scatter(const OpHeader& header, char* data, int p) {
  const int n = mesh_.world().size, me = mesh_.world().rank;
  const std::size_t esize = dtype_size(header.dtype);
  halvings_.clear();
  Halving held{.begin = 0, .count = header.count};
  for (int d = 1; d < p; d <<= 1) {
    Halving step{.begin = held.begin, .count = held.count, .first = held.count / 2, .left = (me & d) == 0};
    halvings_.push_back(step);
    const std::size_t keep_at = step.left ? 0 : step.first, keep = step.left ? step.first : step.count - step.first;
    const std::size_t give_at = step.left ? step.first : 0, give = step.count - keep;
    char* segment = data + step.begin * esize;
    exchange(me ^ d, segment + give_at * esize, give * esize, scratch_.data(), keep * esize);
    char* mine = segment + keep_at * esize;
    const char* theirs = scratch_.data();
    // a: the lower block's partial result (the left rank's), b: the upper block's.
    const AdasumSums piece = step.left ? adasum_sums(mine, theirs, keep, header.dtype)
                                       : adasum_sums(theirs, mine, keep, header.dtype);
    const int block = me & ~(2 * d - 1);  // the 2d ranks whose pieces make up the whole tensor now
    const AdasumWeights w = adasum_weights(sum_over_block(piece, 2 * d), ranks_behind(block, block + d, n, p),
                                           ranks_behind(block + d, block + 2 * d, n, p));
    adasum_combine(mine, theirs, keep, header.dtype, step.left ? w : AdasumWeights{w.b, w.a});
    held = {.begin = step.begin + keep_at, .count = keep};
  }
}

void TcpAdasum::allgather(const OpHeader& header, char* data, int p) {
  const int me = mesh_.world().rank;
  const std::size_t esize = dtype_size(header.dtype);
  int d = p / 2;
  for (auto step = halvings_.rbegin(); step != halvings_.rend(); ++step, d /= 2) {
    char* segment = data + step->begin * esize;
    const std::size_t upper = step->count - step->first;
    if (step->left) exchange(me ^ d, segment, step->first * esize, segment + step->first * esize, upper * esize);
    else exchange(me ^ d, segment + step->first * esize, upper * esize, segment, step->first * esize);
  }
}

AdasumSums TcpAdasum::sum_over_block(AdasumSums mine, int block) {
  const int me = mesh_.world().rank;
  for (int d = 1; d < block; d <<= 1) {
    unsigned char out[24], in[24];
    net::put_u64(out, std::bit_cast<std::uint64_t>(mine.dot));
    net::put_u64(out + 8, std::bit_cast<std::uint64_t>(mine.a_norm_sq));
    net::put_u64(out + 16, std::bit_cast<std::uint64_t>(mine.b_norm_sq));
    exchange(me ^ d, out, sizeof out, in, sizeof in);
    mine.dot += std::bit_cast<double>(net::get_u64(in));
    mine.a_norm_sq += std::bit_cast<double>(net::get_u64(in + 8));
    mine.b_norm_sq += std::bit_cast<double>(net::get_u64(in + 16));
  }
  return mine;
}

void TcpAdasum::exchange(int peer, const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes) {
  // Both partners cut a message into the same pieces (from its length), piece k on connection k.
  const auto pieces_of = [&](std::size_t bytes) {
    const auto streams = static_cast<std::size_t>(mesh_.streams());
    return static_cast<int>(std::clamp<std::size_t>(bytes / kMinStripeBytes, 1, streams));
  };
  Transfer transfers[2 * kMaxTcpStreams];
  std::size_t used = 0;
  const auto add = [&](bool send, const void* buffer, std::size_t bytes) {
    const int pieces = pieces_of(bytes);
    for (int k = 0; k < pieces && bytes; ++k) {
      const std::size_t from = bytes * static_cast<std::size_t>(k) / static_cast<std::size_t>(pieces);
      const std::size_t to = bytes * static_cast<std::size_t>(k + 1) / static_cast<std::size_t>(pieces);
      char* at = static_cast<char*>(const_cast<void*>(buffer)) + from;
      Transfer& t = transfers[used++];
      t = send ? send_to(peer, at, to - from) : recv_from(peer, at, to - from);
      t.stream = k;
    }
  };
  add(true, out, out_bytes);
  add(false, in, in_bytes);
  if (used) mesh_.run_pairwise(std::span(transfers, used), kWhat);
}

}  // namespace ringrun::core
