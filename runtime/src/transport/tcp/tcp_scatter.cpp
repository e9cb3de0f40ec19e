// Alltoall and reduce-scatter over the TCP mesh (tcp_transport.hpp): the collectives whose result
// differs per rank. Both check headers first, as every collective here does, so a mismatch is
// reported on every rank before any data moves.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace ringrun::core {

void TcpTransport::alltoall(const OpHeader& header, const void* send, std::span<const std::size_t> to_each,
                            const AlltoallOutput& output) {
  const int n = group_.size(), me = group_.index;
  const std::size_t esize = dtype_size(header.dtype);
  if (to_each.size() != static_cast<std::size_t>(n))
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("alltoall: {} counts for {} ranks", to_each.size(), n));
  if (n > 1) check_headers(header);
  // Every rank tells every other how many elements it sends it.
  std::vector<std::uint64_t> out_counts(to_each.begin(), to_each.end());
  std::vector<std::uint64_t> in_counts(static_cast<std::size_t>(n), 0);
  in_counts[static_cast<std::size_t>(me)] = to_each[static_cast<std::size_t>(me)];
  std::vector<Transfer> transfers;
  for (int i = 0; i < n; ++i) {
    if (i == me) continue;
    transfers.push_back(send_to(peer(i), &out_counts[static_cast<std::size_t>(i)], sizeof(std::uint64_t)));
    transfers.push_back(recv_from(peer(i), &in_counts[static_cast<std::size_t>(i)], sizeof(std::uint64_t)));
  }
  if (!transfers.empty()) mesh_.run(transfers, "alltoall");
  std::vector<std::size_t> from_each(in_counts.begin(), in_counts.end());
  std::size_t total = 0;
  for (std::size_t c : from_each) total += c;
  auto* recv = static_cast<char*>(output(total, from_each));
  if (total && !recv) throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "alltoall: no output buffer for the received elements");
  transfers.clear();
  const auto* in = static_cast<const char*>(send);
  std::size_t send_at = 0, recv_at = 0;
  for (int i = 0; i < n; ++i) {
    const std::size_t out_bytes = to_each[static_cast<std::size_t>(i)] * esize;
    const std::size_t in_bytes = from_each[static_cast<std::size_t>(i)] * esize;
    if (i == me) {
      if (out_bytes) std::memcpy(recv + recv_at, in + send_at, out_bytes);
    } else {
      if (out_bytes) transfers.push_back(send_to(peer(i), in + send_at, out_bytes));
      if (in_bytes) transfers.push_back(recv_from(peer(i), recv + recv_at, in_bytes));
    }
    send_at += out_bytes;
    recv_at += in_bytes;
  }
  if (!transfers.empty()) mesh_.run(transfers, "alltoall");
}

void TcpTransport::reduce_scatter(const OpHeader& header, const void* send, void* recv, std::span<const std::size_t> bounds) {
  const int n = group_.size(), me = group_.index;
  const std::size_t esize = dtype_size(header.dtype);
  if (bounds.size() != static_cast<std::size_t>(n) + 1 || bounds.back() != header.count)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("reducescatter: {} block bounds for {} ranks and {} elements", bounds.size(), n, header.count));
  auto block_begin = [&](int i) { return bounds[static_cast<std::size_t>(i)]; };
  auto block_size = [&](int i) { return bounds[static_cast<std::size_t>(i) + 1] - bounds[static_cast<std::size_t>(i)]; };
  const auto* in = static_cast<const char*>(send);
  if (n == 1) {
    if (header.count && recv != send) std::memmove(recv, in, header.count * esize);
    return;
  }
  check_headers(header);
  // Step s sends the partial sum of block (me - s - 1) to the next rank and receives block
  // (me - s - 2) from the previous one, adding this rank's input to it; after n - 1 steps the
  // block received last is this rank's own, complete.
  std::size_t largest = 0;
  for (int i = 0; i < n; ++i) largest = std::max(largest, block_size(i));
  scratch_.resize(2 * largest * esize);
  char* partial[2] = {scratch_.data(), scratch_.data() + largest * esize};
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  auto mod = [n](int a) { return ((a % n) + n) % n; };
  for (int step = 0; step < n - 1; ++step) {
    const int out_block = mod(me - step - 1), in_block = mod(me - step - 2);
    const char* outgoing = step == 0 ? in + block_begin(out_block) * esize : partial[(step - 1) % 2];
    char* incoming = partial[step % 2];
    Transfer transfers[2] = {send_to(peer(next), outgoing, block_size(out_block) * esize),
                             recv_from(peer(prev), incoming, block_size(in_block) * esize)};
    mesh_.run(transfers, "reducescatter");
    const bool last = step == n - 2;
    char* target = last ? static_cast<char*>(recv) : incoming;
    if (const std::size_t m = block_size(in_block))
      reduce(target, incoming, in + block_begin(in_block) * esize, m, header.dtype, header.op);
  }
  if (header.op == RINGRUN_AVERAGE && block_size(me)) finish_average(recv, block_size(me), header.dtype, n);
}

}  // namespace ringrun::core
