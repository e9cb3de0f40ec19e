// Adasum (RINGRUN_ADASUM, ringrun(3)) among every rank of the world, over the TCP mesh whatever
// transport the other collectives use: the mesh connects every pair of ranks, on one host or
// several, so one algorithm serves the tcp, shm and shm+tcp communicators alike.
//
// Recursive vector halving, distance doubling among p = 2^k ranks (0 .. p-1): at distance
// d = 1, 2, .., p/2 each rank splits the segment it holds in two (the lower half to the rank
// whose bit d is clear), swaps the half it gives up with rank ^ d, and combines the half it keeps
// with its partner's copy. Those two copies are the partial results of two subtrees of d ranks;
// their dot product and squared norms are sums over the whole tensor, whose pieces at this step
// lie with the 2d ranks of the block, so the three sums go round that block by recursive doubling
// (bit-identical on each of its ranks: IEEE addition commutes). Then the halves go back out in the
// reverse order (an allgather). Each element is combined by exactly one rank per step, so every
// rank ends with the same bits.
//
// With p < n < 2p ranks, rank p + j first hands its tensor to rank j, which combines the two
// locally (it holds both whole), and gets the result back at the end. The tree is then
// unbalanced: each pair is weighted by the ranks its two sides stand for (adasum_weights), so
// tensors that are multiples of one another still give their mean over all n ranks.
//
// Every step is one exchange with one partner (TcpMesh::run_pairwise, as recursive doubling's),
// striped across the mesh's connections when large. The caller compares the headers first.
#pragma once

#include <cstddef>
#include <vector>

#include "core/adasum.hpp"
#include "core/world.hpp"
#include "transport/tcp/tcp_mesh.hpp"

namespace ringrun::core {

class TcpAdasum {
 public:
  explicit TcpAdasum(TcpMesh& mesh) : mesh_(mesh) {}

  // recv = the Adasum of every rank's send (header.count elements of header.dtype, a dtype
  // adasum_dtype() accepts); send == recv: in place. Collective over the whole world; every rank
  // has checked header against every other rank's before (the exchanges carry data only).
  void allreduce(const OpHeader& header, const void* send, void* recv);

  // An exchange of at least this many bytes is striped across the mesh's connections.
  static constexpr std::size_t kMinStripeBytes = 64 * 1024;

 private:
  // One halving step: the segment [begin, begin + count) split after `first` elements, this
  // rank keeping the lower part (left) or the upper one.
  struct Halving {
    std::size_t begin = 0, count = 0, first = 0;
    bool left = false;
  };

  // Rank j < n - p: combines rank p + j's tensor into its own first, and sends it the result last.
  void fold_in(const OpHeader& header, char* data, int p);
  void fold_out(const OpHeader& header, char* data, int p);
  void reduce_scatter(const OpHeader& header, char* data, int p);
  void allgather(const OpHeader& header, char* data, int p);
  // The three sums over the 2^k-rank block of this rank (block ranks, aligned), by recursive
  // doubling with the ranks at distances 1, 2, .., block / 2.
  AdasumSums sum_over_block(AdasumSums mine, int block);
  // Sends out_bytes to peer and receives in_bytes from it, at once.
  void exchange(int peer, const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes);

  TcpMesh& mesh_;
  std::vector<char> scratch_;     // the partner's copy of the kept half (persistent: grown, never shrunk)
  std::vector<Halving> halvings_;  // this call's steps, undone in reverse by the allgather
};

}  // namespace ringrun::core
