#include "transport/nccl/nccl_transport.hpp"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"
#include "transport/nccl/cuda_api.hpp"
#include "transport/tcp/tcp_mesh.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "ringrun compiles against NCCL 2.14 or newer headers (ncclCommInitRankConfig, ncclCommFinalize)"
#endif

namespace ringrun::core {

struct NcclTransport::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(1);
// How long a wait polls without sleeping. A sleep of 20 us overshoots to 50-60 us on a loaded or
// virtualised host: on an H200 a 64 MiB copy (43 us) took 95 us when the wait slept after 64
// polls. Past this, ops run long enough that a sleep between polls costs little.
constexpr auto kSpinFor = std::chrono::milliseconds(2);
constexpr auto kFinalizeBudget = std::chrono::seconds(5);  // the peer-death budget

const CudaRuntimeApi& cuda() { return cuda_runtime_api(); }
const NcclApi& nccl() { return nccl_api(); }

[[noreturn]] void cuda_failed(const char* call, cudaError_t rc) {
  (void)cuda().GetLastError();
  throw RuntimeError(RINGRUN_ERR_INTERNAL,
                     fmt::format("{}: {} ({})", call, cuda().GetErrorString(rc), cuda().GetErrorName(rc)));
}

void check_cuda(const char* call, cudaError_t rc) {
  if (rc != cudaSuccess) cuda_failed(call, rc);
}

int nccl_code(ncclResult_t rc) {
  switch (rc) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return RINGRUN_ERR_INVALID_ARGUMENT;
    case ncclRemoteError: return RINGRUN_ERR_PEER;
    default: return RINGRUN_ERR_INTERNAL;
  }
}

[[noreturn]] void nccl_failed(const char* call, ncclResult_t rc, ncclComm_t comm) {
  const char* detail = nccl().GetLastError(comm);
  throw RuntimeError(nccl_code(rc), fmt::format("{}: {}{}{}", call, nccl().GetErrorString(rc),
                                                detail && *detail ? ": " : "", detail ? detail : ""));
}

ncclDataType_t nccl_dtype(ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return ncclFloat32;
    case RINGRUN_FLOAT64: return ncclFloat64;
    case RINGRUN_FLOAT16: return ncclFloat16;
    case RINGRUN_BFLOAT16: return ncclBfloat16;
    case RINGRUN_INT32: return ncclInt32;
    case RINGRUN_INT64: return ncclInt64;
    case RINGRUN_UINT8: return ncclUint8;
    case RINGRUN_INT8: return ncclInt8;
    case RINGRUN_INT16:
    case RINGRUN_BOOL: break;  // NCCL has no int16, and its uint8 sum is not bool's or
  }
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                     fmt::format("nccl: dtype {} is not reduced on CUDA devices; move the tensor to the host or cast it",
                                 dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM: return ncclSum;
    case RINGRUN_AVERAGE: return ncclAvg;
    case RINGRUN_MIN: return ncclMin;
    case RINGRUN_MAX: return ncclMax;
    case RINGRUN_PRODUCT: return ncclProd;
    case RINGRUN_ADASUM: break;  // host memory only: the communicator refuses device buffers first
  }
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("nccl: unknown op {}", static_cast<int>(op)));
}

// Makes `device` current for the scope and restores the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda("cudaGetDevice", cuda().GetDevice(&previous_));
    if (previous_ != device) check_cuda(fmt::format("cudaSetDevice({})", device).c_str(), cuda().SetDevice(device));
  }
  ~DeviceScope() {
    int current = previous_;
    if (cuda().GetDevice(&current) == cudaSuccess && current != previous_) (void)cuda().SetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

NcclTransport::NcclTransport(const World& world, Transport* host, TcpMesh* mesh, int device,
                             std::function<std::uint64_t()> next_seq)
    : world_(world), host_(host), mesh_(mesh), device_(device), next_seq_(std::move(next_seq)),
      state_(std::make_unique<State>()) {}

NcclTransport::~NcclTransport() { close(false); }

std::unique_ptr<NcclTransport> NcclTransport::create(const World& world, Transport* host, TcpMesh* mesh, int device,
                                                     std::function<std::uint64_t()> next_seq) {
  if (world.size > 1 && (host == nullptr || mesh == nullptr))
    throw RuntimeError(RINGRUN_ERR_INTERNAL, "nccl: more than one rank but no host transport for the unique id");
  const NcclApi& api = nccl();  // the communicator has loaded both libraries (device_transport)
  std::unique_ptr<NcclTransport> self(new NcclTransport(world, host, mesh, device, std::move(next_seq)));
  ncclUniqueId id{};
  if (world.rank == 0) {
    ncclResult_t rc = api.GetUniqueId(&id);
    if (rc != ncclSuccess) nccl_failed("ncclGetUniqueId", rc, nullptr);
  }
  if (world.size > 1) {
    // Every rank takes part even when rank 0 failed above: then the others fail on the hang-up.
    OpHeader header{.seq = self->next_seq_(), .count = sizeof id, .kind = Collective::broadcast,
                    .dtype = RINGRUN_UINT8, .root = 0};
    host->broadcast(header, &id);
  }
  DeviceScope scope(device);
  State& s = *self->state_;
  check_cuda("cudaStreamCreate", cuda().StreamCreate(&s.stream));
  // Non-blocking initialisation: the wait below watches the host connections for a dead peer.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc = api.CommInitRankConfig(&s.comm, world.size, id, world.rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    s.comm = nullptr;
    nccl_failed(fmt::format("ncclCommInitRank (rank {} of {}, device {})", world.rank, world.size, device).c_str(), rc,
                nullptr);
  }
  self->wait_for("ncclCommInitRank", false);
  return self;
}

// Polls the communicator (and, for a collective, the stream) until done; watches the peers.
void NcclTransport::wait_for(const char* what, bool stream) {
  State& s = *state_;
  const auto start = Clock::now();
  const auto spin_until = start + kSpinFor;
  auto next_check = start + kPeerCheckInterval;
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = nccl().CommGetAsyncError(s.comm, &async);
    if (rc != ncclSuccess) {
      close(false);
      nccl_failed(fmt::format("{}: ncclCommGetAsyncError", what).c_str(), rc, nullptr);
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      std::string detail = nccl().GetLastError(s.comm);
      close(false);
      throw RuntimeError(nccl_code(async), fmt::format("{}: {}{}{}", what, nccl().GetErrorString(async),
                                                       detail.empty() ? "" : ": ", detail));
    }
    if (async == ncclSuccess) {
      if (!stream) return;
      cudaError_t ready = cuda().StreamQuery(s.stream);
      if (ready == cudaSuccess) return;
      if (ready != cudaErrorNotReady) {
        close(false);
        cuda_failed(fmt::format("{}: cudaStreamQuery", what).c_str(), ready);
      }
    }
    if (mesh_ && Clock::now() >= next_check) {
      try {
        mesh_->check_alive(what);
      } catch (...) {
        close(false);  // ncclCommAbort: the kernels waiting for the dead peer end
        throw;
      }
      next_check = Clock::now() + kPeerCheckInterval;
    }
    if (Clock::now() >= spin_until) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

NcclTransport::State& NcclTransport::live(const char* what) {
  if (!state_->comm)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("{}: the NCCL communicator was aborted after an earlier error",
                                                         what));
  return *state_;
}

void NcclTransport::check_headers(const OpHeader& header) {
  if (world_.size == 1) return;
  OpHeader mine{};
  std::memset(static_cast<void*>(&mine), 0, sizeof mine);  // no stray padding bytes on the wire
  mine.seq = header.seq;
  mine.count = header.count;
  mine.kind = header.kind;
  mine.dtype = header.dtype;
  mine.op = header.op;
  mine.root = header.root;
  std::vector<OpHeader> all(world_.size);
  OpHeader wire{.seq = next_seq_(), .count = sizeof mine, .kind = Collective::allgather, .dtype = RINGRUN_UINT8};
  host_->allgather(wire, &mine, all.data());
  for (int r = 0; r < world_.size; ++r)
    if (!all[r].matches(mine)) throw_mismatch(world_, mine, r, all[r]);
}

void NcclTransport::allreduce(const OpHeader& header, const void* send, void* recv) {
  check_headers(header);
  if (header.count == 0) return;
  State& s = live("ncclAllReduce");
  DeviceScope scope(device_);
  if (world_.size == 1) {
    // One rank: every op's result is the input (an average divides by 1). NCCL 2.28.9's one-rank
    // average leaves the last count % 4 elements of an out-of-place result unwritten (seen on an
    // H200, ncclAllReduce called directly: runtime_nccl_test), and a copy is all NCCL does for a sum.
    if (send != recv)
      check_cuda("cudaMemcpyAsync",
                 cuda().MemcpyAsync(recv, send, header.bytes(), cudaMemcpyDeviceToDevice, s.stream));
    wait_for("cudaMemcpyAsync", true);
    return;
  }
  ncclResult_t rc = nccl().AllReduce(send, recv, header.count, nccl_dtype(header.dtype), nccl_op(header.op), s.comm,
                                  s.stream);
  if (rc != ncclSuccess && rc != ncclInProgress) nccl_failed("ncclAllReduce", rc, s.comm);
  wait_for("ncclAllReduce", true);
}

void NcclTransport::broadcast(const OpHeader& header, void* buf) {
  check_headers(header);
  if (header.count == 0) return;
  State& s = live("ncclBroadcast");
  DeviceScope scope(device_);
  ncclResult_t rc = nccl().Broadcast(buf, buf, header.count, nccl_dtype(header.dtype), header.root, s.comm, s.stream);
  if (rc != ncclSuccess && rc != ncclInProgress) nccl_failed("ncclBroadcast", rc, s.comm);
  wait_for("ncclBroadcast", true);
}

void NcclTransport::allgather(const OpHeader& header, const void* send, void* recv) {
  check_headers(header);
  if (header.count == 0) return;
  State& s = live("ncclAllGather");
  DeviceScope scope(device_);
  const std::size_t block = header.bytes();
  const auto* source = static_cast<const char*>(send);
  char* slot = static_cast<char*>(recv) + block * static_cast<std::size_t>(world_.rank);
  const char* all_begin = static_cast<const char*>(recv);
  const char* all_end = all_begin + block * static_cast<std::size_t>(world_.size);
  // As on the host path, send may be anywhere, even inside recv (send == recv: "in place"). NCCL
  // takes it in place only at this rank's slot; anything else overlapping recv is staged first.
  void* staged = nullptr;
  if (source != slot && source < all_end && source + block > all_begin) {
    check_cuda("cudaMallocAsync", cuda().MallocAsync(&staged, block, s.stream));
    check_cuda("cudaMemcpyAsync", cuda().MemcpyAsync(staged, source, block, cudaMemcpyDeviceToDevice, s.stream));
    source = static_cast<const char*>(staged);
  }
  ncclResult_t rc = nccl().AllGather(source, recv, header.count, nccl_dtype(header.dtype), s.comm, s.stream);
  if (staged) (void)cuda().FreeAsync(staged, s.stream);
  if (rc != ncclSuccess && rc != ncclInProgress) nccl_failed("ncclAllGather", rc, s.comm);
  wait_for("ncclAllGather", true);
}

void NcclTransport::barrier(const OpHeader& header) {
  // Nothing on the device to order: the host transport's barrier is the barrier.
  if (host_) host_->barrier(header);
}

void NcclTransport::close(bool orderly) noexcept {
  State& s = *state_;
  if (s.comm) {
    bool destroyed = false;
    // Only a transport that was created (both libraries loaded) has a communicator or a stream.
    const NcclApi& api = nccl();
    ncclResult_t finalized = orderly ? api.CommFinalize(s.comm) : ncclInternalError;
    if (finalized == ncclSuccess || finalized == ncclInProgress) {
      // Bounded: a peer that died after the finalize barrier must not hang this rank.
      auto deadline = Clock::now() + kFinalizeBudget;
      ncclResult_t async = ncclInProgress;
      while (Clock::now() < deadline && api.CommGetAsyncError(s.comm, &async) == ncclSuccess && async == ncclInProgress)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (async == ncclSuccess) destroyed = api.CommDestroy(s.comm) == ncclSuccess;
    }
    if (!destroyed) (void)api.CommAbort(s.comm);
    s.comm = nullptr;
  }
  if (s.stream) {
    const CudaRuntimeApi& rt = cuda();
    int previous = 0;
    bool restore = rt.GetDevice(&previous) == cudaSuccess && previous != device_ && rt.SetDevice(device_) == cudaSuccess;
    (void)rt.StreamDestroy(s.stream);
    if (restore) (void)rt.SetDevice(previous);
    s.stream = nullptr;
  }
}

}  // namespace ringrun::core
