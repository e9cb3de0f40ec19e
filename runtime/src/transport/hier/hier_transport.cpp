#include "transport/hier/hier_transport.hpp"

#include <algorithm>

#include "core/dtype.hpp"

namespace ringrun::core {
namespace {

struct Range {
  std::size_t begin, size;
};
// Shard i of count elements split over n (the first count % n shards one element larger).
Range shard(std::size_t count, int n, int i) {
  const std::size_t base = count / static_cast<std::size_t>(n), extra = count % static_cast<std::size_t>(n);
  const auto ui = static_cast<std::size_t>(i);
  return {ui * base + std::min(ui, extra), base + (ui < extra ? 1 : 0)};
}

}  // namespace

HierTransport::HierTransport(const World& world, std::unique_ptr<ShmTransport> local,
                             std::unique_ptr<TcpTransport> cross, TcpTransport& world_tcp, std::vector<int> host_of,
                             std::vector<int> local_index_of)
    : world_(world),
      local_(std::move(local)),
      cross_(std::move(cross)),
      world_tcp_(world_tcp),
      host_of_(std::move(host_of)),
      local_index_of_(std::move(local_index_of)),
      local_size_(world.local_size) {}

void HierTransport::allreduce(const OpHeader& header, const void* send, void* recv_ptr) {
  world_tcp_.check_headers(header);
  auto* recv = static_cast<char*>(recv_ptr);
  // The phases combine partial results: AVERAGE sums and divides once at the end.
  OpHeader phase = header;
  if (header.op == RINGRUN_AVERAGE) phase.op = RINGRUN_SUM;
  local_->allreduce(phase, send, recv);
  if (header.bytes() <= kUnshardedMaxBytes || header.count < static_cast<std::uint64_t>(local_size_)) {
    cross_->allreduce(phase, recv, recv);
    if (header.op == RINGRUN_AVERAGE) finish_average(recv, header.count, header.dtype, world_.size);
    return;
  }
  const std::size_t esize = dtype_size(header.dtype);
  const int me = local_index_of_[static_cast<std::size_t>(world_.rank)];
  const Range mine = shard(header.count, local_size_, me);
  OpHeader cross = phase;
  cross.count = mine.size;
  char* own = recv + mine.begin * esize;
  cross_->allreduce(cross, own, own);
  if (header.op == RINGRUN_AVERAGE) finish_average(own, mine.size, header.dtype, world_.size);
  for (int p = 0; p < local_size_; ++p) {
    const Range part = shard(header.count, local_size_, p);
    OpHeader share{.seq = header.seq, .count = part.size, .kind = Collective::broadcast, .dtype = header.dtype,
                   .root = p};
    local_->broadcast(share, recv + part.begin * esize);
  }
}

void HierTransport::broadcast(const OpHeader& header, void* buf) {
  world_tcp_.check_headers(header);
  const auto root = static_cast<std::size_t>(header.root);
  const int root_local = local_index_of_[root];
  if (local_index_of_[static_cast<std::size_t>(world_.rank)] == root_local) {
    OpHeader across = header;
    across.root = host_of_[root];  // the root's index in its cross group
    cross_->broadcast(across, buf);
  }
  OpHeader within = header;
  within.root = root_local;
  local_->broadcast(within, buf);
}

void HierTransport::allgather(const OpHeader& header, const void* send, void* recv) {
  world_tcp_.allgather(header, send, recv);
}

void HierTransport::barrier(const OpHeader& header) { world_tcp_.barrier(header); }

}  // namespace ringrun::core
