// A peer library the benchmark times on the same ranks and buffers as ringrun: Open MPI
// (mpi_peer.cpp) or Gloo (gloo_peer.cpp). One interface, one file per implementation.
#pragma once

#include <ringrun/ringrun.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ringrun::bench {

enum class Collective { allreduce, broadcast, allgather };
std::string_view collective_name(Collective collective);

// One collective on fixed buffers. `count` is elements per rank (allgather: each rank's share;
// `recv` holds ranks × count). Broadcast works in place on `recv` from `root`.
struct CollectiveCall {
  Collective collective = Collective::allreduce;
  const void *send = nullptr;
  void *recv = nullptr;
  std::size_t count = 0;
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  ringrun_op op = RINGRUN_SUM;
  int root = 0;
};

class Peer {
 public:
  virtual ~Peer() = default;
  // What the table's peer columns measure, e.g. "Open MPI 4.1.4 MPI_Allreduce".
  virtual std::string description(Collective collective) const = 0;
  // A callable that runs `call` once, built outside the timed region; empty when the peer has no
  // such operation (then `why_not` says why, e.g. "MPI has no average").
  virtual std::function<void()> prepare(const CollectiveCall &call, std::string &why_not) = 0;
  // The peer's own barrier, run before each of its timed samples.
  virtual void barrier() = 0;
};

#ifdef RINGRUN_BENCH_HAVE_MPI
// Needs MPI_Init to have run; uses MPI_COMM_WORLD.
std::unique_ptr<Peer> make_mpi_peer();
#endif
#ifdef RINGRUN_BENCH_HAVE_GLOO
// Connects a Gloo context over 127.0.0.1 through a FileStore in `store_dir`, a directory all ranks
// see (rank 0 makes it and removes it once everyone has connected).
std::unique_ptr<Peer> make_gloo_peer(int rank, int size, const std::string &store_dir);
// make_gloo_peer with a store directory rank 0 makes and tells the others through ringrun_broadcast;
// fails the benchmark with the fix when Gloo cannot connect. Collective.
std::unique_ptr<Peer> connect_gloo(int rank, int ranks);
#endif

}  // namespace ringrun::bench
