#include "transport/hier/hier_transport.hpp"

#include "core/dtype.hpp"

namespace ringrun::core {

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

void HierTransport::check(const OpHeader& header) {
  cross_->doubling(header, nullptr, nullptr, 0, local_->host_round(header));
}

void HierTransport::allreduce(const OpHeader& header, const void* send, void* recv_ptr) {
  const std::size_t bytes = header.bytes();
  if (bytes <= TcpTransport::kDirectMaxBytes && bytes <= local_->slot_bytes()) {
    const HeaderVerdict host = local_->host_allreduce(header, send, recv_ptr);
    return cross_->doubling(header, recv_ptr, recv_ptr, bytes, host, world_.size);
  }
  check(header);
  auto* recv = static_cast<char*>(recv_ptr);
  // The phases combine partial results: AVERAGE sums and divides once at the end.
  OpHeader phase = header;
  if (header.op == RINGRUN_AVERAGE) phase.op = RINGRUN_SUM;
  local_->reduce_scatter(phase, send, recv);

  const std::size_t esize = dtype_size(header.dtype);
  const int me = local_index_of_[static_cast<std::size_t>(world_.rank)];
  // 0 only with more ranks per host than elements: then the last shard is the whole buffer. The
  // same blocks as the reduce-scatter's.
  const std::size_t block = header.count / static_cast<std::size_t>(local_size_);
  const std::size_t begin = block * static_cast<std::size_t>(me);
  const std::size_t size = me == local_size_ - 1 ? header.count - begin : block;
  OpHeader cross = phase;
  cross.count = size;
  char* own = recv + begin * esize;
  cross_->allreduce(cross, own, own);
  if (header.op == RINGRUN_AVERAGE) finish_average(own, size, header.dtype, world_.size);

  OpHeader gather{.seq = header.seq, .count = block, .kind = Collective::allgather, .dtype = header.dtype};
  local_->allgather(gather, recv + block * static_cast<std::size_t>(me) * esize, recv);
  const std::size_t tail_begin = block * static_cast<std::size_t>(local_size_);
  if (tail_begin < header.count) {
    OpHeader tail{.seq = header.seq, .count = header.count - tail_begin, .kind = Collective::broadcast,
                  .dtype = header.dtype, .root = local_size_ - 1};
    local_->broadcast(tail, recv + tail_begin * esize);
  }
}

void HierTransport::broadcast(const OpHeader& header, void* buf) {
  check(header);
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
  check(header);
  world_tcp_.allgather_ring(header, send, recv);
}

void HierTransport::barrier(const OpHeader& header) { check(header); }

}  // namespace ringrun::core
