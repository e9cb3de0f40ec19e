// Collectives on device buffers through NCCL (built only with RINGRUN_HAVE_NCCL). One NCCL
// communicator per ringrun communicator, created on first use on the device of that call's buffer:
// rank 0's ncclGetUniqueId travels over the host transport (a broadcast of bytes), then
// ncclCommInitRank. Every call first allgathers its header over the host transport (mismatches are
// reported on every rank, as on the host path), runs the NCCL collective on a stream this transport
// owns and waits for it: the C API is synchronous. The stream is a blocking one, so work the program
// queued on the legacy default stream is ordered before the collective; work on other streams must be
// synchronized by the program first.
//
// While waiting, NCCL's asynchronous error is polled and the host connections are watched for a
// dead peer (the host transport's hang-up detection): either aborts the NCCL communicator
// (ncclCommAbort) and fails the call, so a dead peer never leaves a rank hanging in a kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/world.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class TcpMesh;

class NcclTransport final : public Transport {
 public:
  // Collective over the host ranks (host is null only for one rank): creates the NCCL communicator
  // on CUDA device `device`. next_seq numbers the host collectives this transport runs.
  static std::unique_ptr<NcclTransport> create(const World& world, Transport* host, TcpMesh* mesh, int device,
                                               std::function<std::uint64_t()> next_seq);
  ~NcclTransport() override;  // aborts the NCCL communicator unless close(true) ran

  const char* name() const override { return "nccl"; }
  int device() const { return device_; }
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;

  // orderly (after the finalize barrier): ncclCommFinalize + ncclCommDestroy; else ncclCommAbort.
  void close(bool orderly) noexcept;

  struct State;  // CUDA/NCCL handles (nccl_transport.cpp)

 private:
  NcclTransport(const World& world, Transport* host, TcpMesh* mesh, int device,
                std::function<std::uint64_t()> next_seq);
  void check_headers(const OpHeader& header);
  // Waits until the NCCL communicator (and, when stream, the stream) has no work in progress.
  void wait_for(const char* what, bool stream);
  State& live(const char* what);  // the state; throws when the communicator was aborted

  const World& world_;
  Transport* host_;
  TcpMesh* mesh_;
  int device_;
  std::function<std::uint64_t()> next_seq_;
  std::unique_ptr<State> state_;
};

}  // namespace ringrun::core
