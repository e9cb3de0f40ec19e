// Collectives for jobs on several hosts with the same number L > 1 of ranks on each (Horovod's
// hierarchical allreduce): shared memory among the ranks of a host, TCP only between hosts.
//
// Every call first checks its header against every rank's over TCP (TcpTransport::check_headers),
// so that a mismatch is reported on every rank before any data moves, whichever phase the ranks
// would have disagreed in (the cross group then sends no headers of its own). Then, for an
// allreduce of count elements, q = count / L:
//   (a) shared-memory reduce-scatter among the host's ranks: rank l of the host ends with the
//       host's sum of shard l (elements [l q, (l+1) q), the last shard up to count), one pass
//       over the input (an allreduce here would also copy every other shard back);
//   (b) TCP allreduce of shard l among the ranks with local index l, one per host (the "cross"
//       group), so each byte crosses the network once per host, not once per rank;
//   (c) shared-memory allgather of the q-element shards, and a broadcast of the last shard's
//       remaining count - L q elements from local index L-1 when count is not a multiple of L.
// Each shard is reduced by exactly one cross group, so every rank ends with the same bits; AVERAGE
// sums throughout and divides by the world size once. Allreduces up to
// TcpTransport::kDirectMaxBytes take the flat TCP small path instead (the data travels with the
// header check: a direct exchange, or recursive doubling from 4 ranks), measured faster up to there
// (tests/runtime/twohost/twohost_bench.sh; RESULTS.md, session 16).
// Broadcast: TCP from the root to the ranks of its local index on the other hosts, then shared
// memory on each host. Allgather and barrier run on the flat TCP transport.
#pragma once

#include <memory>
#include <vector>

#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class HierTransport final : public Transport {
 public:
  // local: the shared-memory transport among this host's ranks; cross: TCP among the ranks with
  // this rank's local index, hosts in the same order in every cross group, created with
  // headers_checked_elsewhere; world_tcp: flat TCP over every rank. host_of / local_index_of:
  // every rank's host index and index on its host.
  HierTransport(const World& world, std::unique_ptr<ShmTransport> local, std::unique_ptr<TcpTransport> cross,
                TcpTransport& world_tcp, std::vector<int> host_of, std::vector<int> local_index_of);

  const char* name() const override { return "shm+tcp"; }
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;

 private:
  const World& world_;
  std::unique_ptr<ShmTransport> local_;
  std::unique_ptr<TcpTransport> cross_;
  TcpTransport& world_tcp_;
  std::vector<int> host_of_;
  std::vector<int> local_index_of_;
  int local_size_;
};

}  // namespace ringrun::core
