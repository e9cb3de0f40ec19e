// Broadcast, allgather and reduce-scatter through the shared-memory segment (see
// shm_transport.hpp): a latency path of one round per slot, and a streamed path through the ring.
#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "transport/shm/shm_copy.hpp"
#include "transport/shm/shm_layout.hpp"
#include "transport/shm/shm_transport.hpp"

namespace ringrun::core {

OpHeader ShmTransport::posted_header(int p) const {
  const shm::SharedHeader& h = control(p).inbox[round_ & 1].post.header;
  return {.seq = h.seq, .count = h.count, .kind = static_cast<Collective>(h.kind),
          .dtype = static_cast<ringrun_dtype>(h.dtype), .op = static_cast<ringrun_op>(h.op), .root = h.root};
}

void ShmTransport::check_headers(const OpHeader& header) {
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.index) continue;
    const OpHeader theirs = posted_header(p);
    if (!header.matches(theirs)) throw_mismatch(world_, header, group_.ranks[p], theirs);
  }
}

// Every header against the first rank's: every rank of the group reads the same posts, so every
// one of them comes to the same verdict.
HeaderVerdict ShmTransport::host_verdict() const {
  const OpHeader first = posted_header(0);
  for (int p = 1; p < group_.size(); ++p)
    if (const OpHeader theirs = posted_header(p); !first.matches(theirs))
      return {.disagree = true, .rank_a = group_.ranks[0], .rank_b = group_.ranks[p], .a = first, .b = theirs};
  return {};
}

HeaderVerdict ShmTransport::host_round(const OpHeader& header) {
  begin_round(header, true);
  arrive_unfenced();
  wait_arrived(collective_name(header.kind));
  HeaderVerdict verdict = host_verdict();
  publish_after_arrival(control(group_.index).consumed);
  return verdict;
}

void ShmTransport::broadcast(const OpHeader& header, void* buf_ptr) {
  auto* buf = static_cast<char*>(buf_ptr);
  const std::size_t bytes = header.bytes();
  const int r = group_.index, root = header.root;
  Control& me = control(r);
  if (bytes <= kDirectMaxBytes) {
    // One round per slot: the latency path.
    std::size_t begin = 0;
    do {
      const std::size_t chunk = std::min(slot_bytes_, bytes - begin);
      begin_round(header, begin == 0);
      if (r == root && chunk) std::memcpy(slot(r, round_), buf + begin, chunk);
      arrive_unfenced();
      // Everyone waits for everyone (not only the root) so that a mismatch is seen on every rank.
      if (begin == 0) {
        wait_arrived("broadcast");
        check_headers(header);
      } else if (r != root) {
        wait(root, arrived(root), round_, "broadcast");
      }
      if (r != root && chunk) std::memcpy(buf + begin, slot(root, round_), chunk);
      publish_after_arrival(me.consumed);
      begin += chunk;
    } while (begin < bytes);
    return;
  }
  // Streamed: the root fills ring chunks while the others copy the previous ones out.
  const std::size_t size = chunk_bytes(bytes);
  const std::size_t chunks = (bytes + size - 1) / size;
  const bool stream = bytes >= kStreamMinBytes;
  const std::uint32_t first = begin_streamed(header, chunks);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::uint32_t g = first + static_cast<std::uint32_t>(k);
    const std::size_t begin = k * size, length = std::min(size, bytes - begin);
    if (r == root) {
      reserve_ring(g, "broadcast");
      std::memcpy(ring(r, g), buf + begin, length);
      publish(me.chunk_arrived, g);
    }
    if (k == 0) {
      wait_arrived("broadcast");
      check_headers(header);
    }
    if (r != root) {
      wait(root, control(root).chunk_arrived, g, "broadcast");
      copy_out(buf + begin, ring(root, g), length, stream);
      publish(me.chunk_consumed, g);
    }
  }
  if (r == root) publish(me.chunk_consumed, chunk_);
  if (stream) stream_fence();
  publish(me.consumed);
}

void ShmTransport::allgather(const OpHeader& header, const void* send_ptr, void* recv_ptr) {
  const auto* send = static_cast<const char*>(send_ptr);
  auto* recv = static_cast<char*>(recv_ptr);
  const std::size_t block = header.bytes();
  const int n = group_.size(), r = group_.index;
  Control& me = control(r);
  if (block <= kDirectMaxBytes) {
    std::size_t begin = 0;
    do {
      const std::size_t chunk = std::min(slot_bytes_, block - begin);
      begin_round(header, begin == 0);
      if (chunk) std::memcpy(slot(r, round_), send + begin, chunk);
      arrive_unfenced();
      wait_arrived("allgather");
      if (begin == 0) check_headers(header);
      for (int p = 0; chunk && p < n; ++p) std::memcpy(recv + block * p + begin, slot(p, round_), chunk);
      publish_after_arrival(me.consumed);
      begin += chunk;
    } while (begin < block);
    return;
  }
  // Streamed: export chunk s of my block while collecting chunk s-1 of everyone's.
  const std::size_t size = chunk_bytes(block);
  const std::size_t chunks = (block + size - 1) / size;
  const bool stream = block * n >= kStreamMinBytes;
  const std::uint32_t first = begin_streamed(header, chunks);
  for (std::size_t step = 0; step < chunks + 1; ++step) {
    if (step < chunks) {
      const std::uint32_t g = first + static_cast<std::uint32_t>(step);
      const std::size_t begin = step * size, length = std::min(size, block - begin);
      reserve_ring(g, "allgather");
      std::memcpy(ring(r, g), send + begin, length);
      publish(me.chunk_arrived, g);
      // My own block straight from send (it is in cache now); nothing to do when gathering in place.
      char* own = recv + block * r + begin;
      if (own != send + begin) copy_out(own, send + begin, length, stream);
      if (step == 0) {
        wait_arrived("allgather");
        check_headers(header);
      }
    }
    if (step >= 1) {
      const std::uint32_t g = first + static_cast<std::uint32_t>(step - 1);
      const std::size_t begin = (step - 1) * size, length = std::min(size, block - begin);
      wait_all(&Control::chunk_arrived, g, "allgather");
      for (int p = 0; p < n; ++p)
        if (p != r) copy_out(recv + block * p + begin, ring(p, g), length, stream);
      publish(me.chunk_consumed, g);
    }
  }
  if (stream) stream_fence();
  publish(me.consumed);
}

void ShmTransport::reduce_scatter(const OpHeader& header, const void* send_ptr, void* recv_ptr,
                                  std::span<const std::size_t> bounds) {
  const auto* send = static_cast<const char*>(send_ptr);
  auto* recv = static_cast<char*>(recv_ptr);
  const int n = group_.size(), r = group_.index;
  const bool compact = !bounds.empty();
  const std::size_t block = header.count / static_cast<std::size_t>(n);
  auto block_begin = [&](int p) { return compact ? bounds[static_cast<std::size_t>(p)] : block * static_cast<std::size_t>(p); };
  auto block_size = [&](int p) {
    if (compact) return bounds[static_cast<std::size_t>(p) + 1] - bounds[static_cast<std::size_t>(p)];
    return p == n - 1 ? header.count - block * static_cast<std::size_t>(n - 1) : block;
  };
  if (n == 1) {  // the whole buffer is this rank's block (the hierarchical path has 2 or more)
    if (recv != send && header.count) std::memcpy(recv, send, header.bytes());
    return;
  }
  Control& me = control(r);
  const std::size_t esize = dtype_size(header.dtype);
  std::size_t largest = 0;
  for (int p = 0; p < n; ++p) largest = std::max(largest, block_size(p));
  // Ring chunk g holds, at p x piece, the k-th piece of block p (this rank's input) for rank p.
  const std::size_t unit = std::max<std::size_t>(1, shm::kLine / esize);
  // In whole cache lines where a ring chunk holds a line per rank (tests use tiny rings).
  std::size_t piece = std::max<std::size_t>(1, chunk_bytes(header.bytes(), 1) / esize / static_cast<std::size_t>(n));
  if (piece >= unit) piece = piece / unit * unit;
  const std::size_t chunks = std::max<std::size_t>(1, (largest + piece - 1) / piece);
  auto elements = [&](int p, std::size_t k) {
    const std::size_t size = block_size(p);
    return k * piece >= size ? 0 : std::min(piece, size - k * piece);
  };
  auto offset = [&](int p, std::size_t k) { return (block_begin(p) + k * piece) * esize; };
  const std::uint32_t first = begin_streamed(header, chunks);
  // Step s: export chunk s, reduce chunk s-1 (the last read of the peers' ring chunks).
  for (std::size_t step = 0; step < chunks + 1; ++step) {
    if (step < chunks) {
      const std::uint32_t g = first + static_cast<std::uint32_t>(step);
      reserve_ring(g, "allreduce");
      for (int p = 0; p < n; ++p)
        if (p != r) std::memcpy(ring(r, g) + piece * esize * p, send + offset(p, step), elements(p, step) * esize);
      publish(me.chunk_arrived, g);
      if (step == 0) {
        wait_arrived("allreduce");
        check_headers(header);
      }
    }
    if (step >= 1) {
      const std::size_t k = step - 1, m = elements(r, k);
      const std::uint32_t g = first + static_cast<std::uint32_t>(k);
      wait_all(&Control::chunk_arrived, g, "allreduce");
      const char* in = send + offset(r, k);
      char* out = recv + (compact ? k * piece * esize : offset(r, k));
      auto source = [&](int p) -> const char* { return p == r ? in : ring(p, g) + piece * esize * r; };
      // In rank order, as the allreduce does, so both give the same bits. With more than two ranks
      // the partial sums go to this rank's own (unused) place in its ring chunk: out may be in.
      if (m) {
        char* acc = n > 2 ? ring(r, g) + piece * esize * r : out;
        reduce(acc, source(0), source(1), m, header.dtype, header.op);
        for (int p = 2; p < n - 1; ++p) reduce(acc, acc, source(p), m, header.dtype, header.op);
        if (n > 2) reduce(out, acc, source(n - 1), m, header.dtype, header.op);
        if (header.op == RINGRUN_AVERAGE) finish_average(out, m, header.dtype, n);
      }
      publish(me.chunk_consumed, g);
    }
  }
  publish(me.consumed);
}

}  // namespace ringrun::core
