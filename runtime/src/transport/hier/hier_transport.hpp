// Collectives for jobs on several hosts with the same number L > 1 of ranks on each (Horovod's
// hierarchical allreduce): shared memory among the ranks of a host, TCP only between hosts.
//
// Every call begins with the same two steps, whatever it is, so that ranks that called different
// collectives still take the same steps until they know it: a shared-memory round on the host in
// which every rank posts its header (ShmTransport::host_round: the host's verdict on its headers,
// returned, not thrown), then recursive doubling over TCP among the ranks with this rank's local
// index, one per host (the "cross" group, TcpTransport::doubling), which carries each host's
// verdict and compares the hosts' headers. A host whose ranks disagree reaches every rank through
// each of its ranks' cross groups; hosts that agree within but not with each other disagree in
// every cross group; so every rank throws the mismatch or none does.
//
// Allreduces up to TcpTransport::kDirectMaxBytes (and one shared-memory slot) carry their data in
// both steps: the host's reduction in the round, then the hosts' reductions combined on the way
// of the doubling (AVERAGE divided by the world's size at the end). Larger ones, for count
// elements, q = count / L, after the two steps carry the headers alone:
//   (a) shared-memory reduce-scatter among the host's ranks: rank l of the host ends with the
//       host's sum of shard l (elements [l q, (l+1) q), the last shard up to count), one pass
//       over the input (an allreduce here would also copy every other shard back);
//   (b) TCP allreduce of shard l among the cross group, so each byte crosses the network once
//       per host, not once per rank;
//   (c) shared-memory allgather of the q-element shards, and a broadcast of the last shard's
//       remaining count - L q elements from local index L-1 when count is not a multiple of L.
// Each shard is reduced by exactly one cross group, so every rank ends with the same bits; AVERAGE
// sums throughout and divides by the world size once.
// Broadcast: TCP from the root to the ranks of its local index on the other hosts, then shared
// memory on each host. Allgather: a TCP ring over every rank. Barrier: the two steps alone.
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
  // The two steps every call begins with (header only); throws the mismatch on every rank.
  void check(const OpHeader& header);

  const World& world_;
  std::unique_ptr<ShmTransport> local_;
  std::unique_ptr<TcpTransport> cross_;
  TcpTransport& world_tcp_;
  std::vector<int> host_of_;
  std::vector<int> local_index_of_;
  int local_size_;
};

}  // namespace ringrun::core
