// The one transport interface: a transport runs whole collectives among the ranks of a World (or
// of a Group of them). Implementations live beside this file: tcp/ (any ranks, any hosts), shm/
// (ranks on one host, through a shared-memory segment), hier/ (several hosts with the same number
// of ranks each: shm within a host, tcp between hosts, built from the other two over groups). The
// communicator picks one per call.
//
// Contract for every method: the header describes the call (the communicator fills seq, count,
// dtype, op, root); the transport compares headers across ranks and throws RuntimeError
// RINGRUN_ERR_MISMATCH on every rank when they differ, RINGRUN_ERR_PEER naming the peer when one
// dies. After an exception the transport is in an unknown state and must not be used again.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include <fmt/format.h>

#include "core/world.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::core {

// One tensor of a scattered allreduce: bytes from send reduced into recv (send == recv: in place).
// The spans of one call are one logical buffer, their concatenation.
struct BufferSpan {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t bytes = 0;
};

// The first disagreement among the headers of one call that a rank knows of, directly or through
// its peers: rank_a called a, rank_b called b (global ranks). Carried by the TCP transport's
// recursive doubling, and from a host's shared-memory round into it (hier/).
struct HeaderVerdict {
  bool disagree = false;
  int rank_a = -1, rank_b = -1;
  OpHeader a, b;
};

// Throws the mismatch a verdict records (disagree must be set), naming a rank whose call differs
// from this rank's (one of the two does).
[[noreturn]] inline void throw_mismatch(const World& world, const OpHeader& mine, const HeaderVerdict& verdict) {
  if (!mine.matches(verdict.a)) throw_mismatch(world, mine, verdict.rank_a, verdict.a);
  throw_mismatch(world, mine, verdict.rank_b, verdict.b);
}

// The receive side of an alltoall, once every rank's count for this one is known: a buffer for
// `total` elements, from_each[i] of them from group index i in index order.
using AlltoallOutput = std::function<void*(std::size_t total, std::span<const std::size_t> from_each)>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // recv = reduction of every rank's send (count elements); send == recv means in place.
  virtual void allreduce(const OpHeader& header, const void* send, void* recv) = 0;
  // buf on every rank = buf on header.root.
  virtual void broadcast(const OpHeader& header, void* buf) = 0;
  // recv (size * count elements) = every rank's send, in rank order.
  virtual void allgather(const OpHeader& header, const void* send, void* recv) = 0;
  virtual void barrier(const OpHeader& header) = 0;
  // Allreduce of the concatenation of spans (header.count elements in all), reading and writing
  // the spans in place: tensor fusion without copies into a fusion buffer and back. Only
  // transports that return true from scattered() implement it.
  virtual bool scattered() const { return false; }
  virtual void allreduce_scattered(const OpHeader& header, std::span<const BufferSpan> spans) {
    (void)spans;
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: the {} transport has no scattered allreduce", header.describe(), name()));
  }
  // The collectives in which every rank ends with a piece of its own. alltoall: send holds
  // to_each[i] elements for group index i, in index order (one count per rank); the output comes
  // from `output`. The TCP transport has it (every pair over the mesh, the same host's too: each
  // byte crosses once, which no shared-memory round of whole buffers would beat).
  virtual void alltoall(const OpHeader& header, const void* send, std::span<const std::size_t> to_each,
                        const AlltoallOutput& output) {
    (void)send, (void)to_each, (void)output;
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: the {} transport has no alltoall", header.describe(), name()));
  }
  // reduce_scatter: reduces every rank's header.count elements and leaves block i =
  // [bounds[i], bounds[i+1]) on group index i, in recv (that block alone). TCP (a ring) and shared
  // memory (one pass over every input) have it.
  virtual void reduce_scatter(const OpHeader& header, const void* send, void* recv, std::span<const std::size_t> bounds) {
    (void)send, (void)recv, (void)bounds;
    throw RuntimeError(RINGRUN_ERR_INTERNAL,
                       fmt::format("{}: the {} transport has no reduce-scatter", header.describe(), name()));
  }
};

}  // namespace ringrun::core
