// The runtime's core: one communicator = the ranks of a job, their connections, and the
// synchronous collectives. The C API (c_api.cpp) and the C++ API (ringrun/runtime.hpp) wrap one
// process-wide instance; the engine (async named operations) drives one from its background
// thread. Not thread-safe: one caller at a time.
//
//   auto comm = Communicator::create(config);     // collective: every rank calls it
//   comm->allreduce(send, recv, count, RINGRUN_FLOAT32, RINGRUN_SUM);
//   comm->finalize();                             // collective: barrier, then close
//
// Errors are RuntimeError (ringrun/runtime.hpp) with a RINGRUN_ERR_* code; after a transport
// error (peer death, mismatch) the communicator refuses further calls with the first error
// (in elastic mode a peer death or timeout is RINGRUN_ERR_RESET).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/world.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class Exchange;
class TcpAdasum;
class TcpMesh;

struct CommunicatorConfig {
  int rank = 0;
  int size = 1;
  std::string hostname;                         // same host name = same host (shared memory)
  std::string listen_address = "127.0.0.1";    // IPv4 this rank listens on and advertises
  std::chrono::milliseconds timeout{60000};     // for every wait during creation
  Exchange* exchange = nullptr;                 // needed when size > 1
  bool enable_shm = true;                       // use shared memory among the ranks of a host
  std::size_t shm_slot_bytes = 0;               // 0: the transport's default
  int tcp_streams = 1;                          // TCP connections per pair of ranks (1..kMaxTcpStreams), 0 = automatic
  // Elastic mode: a dead peer or a timeout breaks the communicator with RINGRUN_ERR_RESET (the
  // world is re-formed) instead of RINGRUN_ERR_PEER / RINGRUN_ERR_TIMEOUT.
  bool elastic = false;
};

class Communicator {
 public:
  static std::unique_ptr<Communicator> create(const CommunicatorConfig& config);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  // "shm", "tcp", "shm+tcp" (hierarchical: shared memory within each host, TCP between hosts) or
  // "self": the transport collectives on host buffers use. Device buffers (CUDA
  // memory) go through NCCL in builds that have it (transport/nccl/), created on first use.
  const char* transport_name() const;

  // RINGRUN_ADASUM runs over the TCP mesh whatever the transport (transport/tcp/tcp_adasum.hpp).
  void allreduce(const void* send, void* recv, std::size_t count, ringrun_dtype dtype, ringrun_op op);
  void broadcast(void* buf, std::size_t count, ringrun_dtype dtype, int root);
  void allgather(const void* send, std::size_t count, ringrun_dtype dtype, void* recv);
  // allgather of buffers the caller knows are host memory (the engine's negotiation records): no
  // probe for device memory, which costs about as much as a small allgather's bookkeeping.
  void allgather_host(const void* send, std::size_t count, ringrun_dtype dtype, void* recv);
  void barrier();

  // Alltoall: send holds to_each[r] elements for rank r, in rank order;
  // output(total, from_each) is called once every rank's counts are known and returns the buffer
  // for what arrives (from_each[r] elements from rank r, in rank order). Host buffers only.
  using AlltoallOutput = core::AlltoallOutput;
  void alltoall(const void* send, std::span<const std::size_t> to_each, ringrun_dtype dtype, const AlltoallOutput& output);
  // Reduce-scatter: the reduction of every rank's count elements, of which rank r keeps block
  // [bounds[r], bounds[r+1]) in recv (size + 1 bounds, the last = count). Host buffers only.
  void reduce_scatter(const void* send, void* recv, std::size_t count, std::span<const std::size_t> bounds,
                      ringrun_dtype dtype, ringrun_op op);

  // Tensor fusion without a fusion buffer: one allreduce over the concatenation of spans (every
  // span's bytes a whole number of dtype elements), each read and written in place. Only when
  // can_allreduce_scattered() (the shared-memory transport, or one rank); otherwise the caller packs.
  bool can_allreduce_scattered() const;
  void allreduce_scattered(std::span<const BufferSpan> spans, ringrun_dtype dtype, ringrun_op op);

  // Barrier over TCP (every rank is past its last collective), then closes the connections.
  // Throws if the barrier fails; the connections are closed either way.
  void finalize();
  // Closes everything at once, without a barrier: what a crashing rank looks like to its peers.
  void abort();

 private:
  Communicator() = default;
  void close(bool orderly);
  template <typename Body> void run(Collective kind, const char* name, Body&& body);
  // For the collectives on host buffers only: refuses device memory in one line naming `what`.
  void require_host(const char* what, const void* a, const void* b);
  // The NCCL transport when the call's buffers are device memory (created on first use: a
  // collective, like the call itself); null for host buffers. Throws for mixed buffers, for a
  // device other than the one NCCL runs on, and in builds without NCCL.
  Transport* device_transport(const char* what, const void* a, const void* b);
  void gather(const void* send, std::size_t count, ringrun_dtype dtype, void* recv, bool may_be_device);
  void adasum(const void* send, void* recv, std::size_t count, ringrun_dtype dtype);

  World world_;
  std::unique_ptr<TcpMesh> mesh_;
  std::unique_ptr<Transport> tcp_;
  std::unique_ptr<Transport> shm_;   // ShmTransport (one host) or HierTransport (several hosts)
  Transport* transport_ = nullptr;  // shm_ when there, else tcp_; null for one rank
  bool hierarchical_ = false;       // shm_ is the HierTransport
  std::unique_ptr<Transport> nccl_;  // NcclTransport, for device buffers
  std::unique_ptr<TcpAdasum> adasum_;  // on the mesh, created on first use
  std::uint64_t seq_ = 0;
  int broken_code_ = 0;
  std::string broken_message_;
  bool closed_ = false;
  bool elastic_ = false;
};

}  // namespace ringrun::core
