// The NCCL transport on device buffers, one rank, through the C API: allreduce (every dtype x op,
// in place and not), broadcast and allgather (in place and not) against the host reference, host
// buffers (pageable and pinned) still on the host path once CUDA is in use, and the errors for
// mixed host/device buffers. Without a CUDA device it checks that host collectives work in a
// build with NCCL and exits 77 (ctest SKIP_RETURN_CODE) with the reason. NCCL and the CUDA runtime
// are called through the functions the runtime loaded (transport/nccl/cuda_api.hpp), as ringrun
// itself calls them: the test links neither.
#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reference.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"
#include "transport/nccl/cuda_api.hpp"

using namespace ringrun::test;
using ringrun::core::dtype_name;
using ringrun::core::dtype_size;
using ringrun::core::op_name;

namespace {

const ringrun::core::CudaRuntimeApi& rt() { return ringrun::core::cuda_runtime_api(); }
const ringrun::core::NcclApi& nccl() { return ringrun::core::nccl_api(); }

int g_failures = 0;

#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      std::fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fprintf(stderr, "\n");                          \
      ++g_failures;                                        \
    }                                                      \
  } while (0)

void cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", call, rt().GetErrorString(rc));
  std::exit(1);
}

// A device copy of a host buffer, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n) { cuda(rt().Malloc(&ptr, n ? n : 1), "cudaMalloc"); }
  DeviceBuffer(const std::vector<char>& host, std::size_t n) : DeviceBuffer(n) { upload(host); }
  ~DeviceBuffer() { rt().Free(ptr); }
  void upload(const std::vector<char>& host) {
    if (bytes) cuda(rt().Memcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<char> download() const {
    std::vector<char> host(bytes + 1);
    if (bytes) cuda(rt().Memcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }
  char* at(std::size_t offset) const { return static_cast<char*>(ptr) + offset; }
};

// Equal, or false after printing where they first differ and how many bytes differ (got, want).
bool same(const std::vector<char>& a, const std::vector<char>& b, std::size_t bytes) {
  if (bytes == 0 || std::memcmp(a.data(), b.data(), bytes) == 0) return true;
  std::size_t first = 0, differing = 0;
  for (std::size_t i = bytes; i-- > 0;)
    if (a[i] != b[i]) {
      first = i;
      ++differing;
    }
  std::fprintf(stderr, "  %zu of %zu bytes differ, the first at byte %zu: got", differing, bytes, first);
  for (std::size_t i = first; i < std::min(bytes, first + 8); ++i) std::fprintf(stderr, " %02x", a[i] & 0xff);
  std::fprintf(stderr, ", want");
  for (std::size_t i = first; i < std::min(bytes, first + 8); ++i) std::fprintf(stderr, " %02x", b[i] & 0xff);
  std::fprintf(stderr, "\n");
  return false;
}

// On one rank, what NCCL itself returns for an allreduce (to tell a ringrun fault from NCCL's).
std::vector<char> nccl_allreduce(const std::vector<char>& input, std::size_t count, ringrun_dtype dtype,
                                 ringrun_op op) {
  const std::size_t bytes = count * dtype_size(dtype);
  DeviceBuffer send(input, bytes), recv(bytes);
  ncclComm_t comm = nullptr;
  int device = 0;
  cuda(rt().GetDevice(&device), "cudaGetDevice");
  if (nccl().CommInitAll(&comm, 1, &device) != ncclSuccess) return {};
  const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16, ncclInt32, ncclInt64, ncclUint8};
  const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMin, ncclMax, ncclProd};
  nccl().AllReduce(send.ptr, recv.ptr, count, types[dtype], ops[op], comm, nullptr);
  cuda(rt().DeviceSynchronize(), "cudaDeviceSynchronize");
  nccl().CommDestroy(comm);
  return recv.download();
}

const std::size_t kCounts[] = {0, 1, 7, 1000, (1u << 20) + 3};

void check_allreduce() {
  const int n = ringrun_size();
  for (auto dtype : kDtypes)
    for (auto op : kOps)
      for (std::size_t count : kCounts) {
        if (count > 100000 && op != RINGRUN_SUM && op != RINGRUN_AVERAGE) continue;
        const std::size_t bytes = count * dtype_size(dtype);
        auto input = make_input(ringrun_rank(), count, dtype, op);
        auto expected = reference(n, count, dtype, op);
        DeviceBuffer in_place(input, bytes);
        int rc = ringrun_allreduce(in_place.ptr, in_place.ptr, count, dtype, op);
        EXPECT(rc == 0, "allreduce in place %s %s %zu: %s", dtype_name(dtype), op_name(op), count, ringrun_last_error());
        EXPECT(same(in_place.download(), expected, bytes), "allreduce in place %s %s %zu: wrong result",
               dtype_name(dtype), op_name(op), count);
        DeviceBuffer send(input, bytes), recv(bytes);
        rc = ringrun_allreduce(send.ptr, recv.ptr, count, dtype, op);
        EXPECT(rc == 0, "allreduce %s %s %zu: %s", dtype_name(dtype), op_name(op), count, ringrun_last_error());
        if (!same(recv.download(), expected, bytes)) {
          EXPECT(false, "allreduce %s %s %zu: wrong result", dtype_name(dtype), op_name(op), count);
          if (ringrun_size() == 1)
            std::fprintf(stderr, "  ncclAllReduce itself on the same input: %s\n",
                         same(nccl_allreduce(input, count, dtype, op), expected, bytes) ? "right" : "wrong too");
        }
        EXPECT(same(send.download(), input, bytes), "allreduce %s %s %zu: send buffer changed", dtype_name(dtype),
               op_name(op), count);
      }
}

void check_broadcast_allgather() {
  const int n = ringrun_size(), rank = ringrun_rank();
  for (auto dtype : kDtypes)
    for (std::size_t count : kCounts) {
      const std::size_t bytes = count * dtype_size(dtype);
      auto root_data = make_input(0, count, dtype, RINGRUN_SUM);
      DeviceBuffer buf(make_input(rank, count, dtype, RINGRUN_SUM), bytes);
      int rc = ringrun_broadcast(buf.ptr, count, dtype, 0);
      EXPECT(rc == 0, "broadcast %s %zu: %s", dtype_name(dtype), count, ringrun_last_error());
      EXPECT(same(buf.download(), root_data, bytes), "broadcast %s %zu: wrong result", dtype_name(dtype), count);

      std::vector<char> expected(bytes * static_cast<std::size_t>(n) + 1);
      for (int r = 0; r < n; ++r) {
        auto part = make_input(r, count, dtype, RINGRUN_SUM);
        if (bytes) std::memcpy(expected.data() + bytes * static_cast<std::size_t>(r), part.data(), bytes);
      }
      auto mine = make_input(rank, count, dtype, RINGRUN_SUM);
      DeviceBuffer send(mine, bytes), recv(bytes * static_cast<std::size_t>(n));
      rc = ringrun_allgather(send.ptr, count, dtype, recv.ptr);
      EXPECT(rc == 0, "allgather %s %zu: %s", dtype_name(dtype), count, ringrun_last_error());
      EXPECT(same(recv.download(), expected, bytes * n), "allgather %s %zu: wrong result", dtype_name(dtype), count);
      // send == recv: this rank's block starts at recv (as on the host path).
      DeviceBuffer in_place(bytes * static_cast<std::size_t>(n));
      if (bytes) cuda(rt().Memcpy(in_place.ptr, mine.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
      rc = ringrun_allgather(in_place.ptr, count, dtype, in_place.ptr);
      EXPECT(rc == 0, "allgather in place %s %zu: %s", dtype_name(dtype), count, ringrun_last_error());
      EXPECT(same(in_place.download(), expected, bytes * n), "allgather in place %s %zu: wrong result",
             dtype_name(dtype), count);
    }
}

// Host buffers once CUDA is in use: pageable and pinned memory stay on the host path.
void check_host_buffers(const char* when) {
  std::vector<float> pageable(1000, 1.5f);
  EXPECT(ringrun_allreduce(pageable.data(), pageable.data(), pageable.size(), RINGRUN_FLOAT32, RINGRUN_SUM) == 0,
         "%s: host allreduce: %s", when, ringrun_last_error());
  EXPECT(pageable[999] == 1.5f * static_cast<float>(ringrun_size()), "%s: host allreduce: wrong result", when);
}

void check_errors() {
  DeviceBuffer device(4 * 16);
  std::vector<float> host(16);
  int rc = ringrun_allreduce(device.ptr, host.data(), 16, RINGRUN_FLOAT32, RINGRUN_SUM);
  EXPECT(rc == RINGRUN_ERR_INVALID_ARGUMENT, "mixed device/host allreduce returned %d", rc);
  EXPECT(std::strstr(ringrun_last_error(), "device memory") != nullptr, "mixed buffers error: '%s'",
         ringrun_last_error());
  std::printf("mixed buffers: %s\n", ringrun_last_error());
  void* pinned = nullptr;
  cuda(rt().MallocHost(&pinned, 4 * 1000), "cudaMallocHost");
  auto* f = static_cast<float*>(pinned);
  for (int i = 0; i < 1000; ++i) f[i] = 2.0f;
  EXPECT(ringrun_allreduce(f, f, 1000, RINGRUN_FLOAT32, RINGRUN_MAX) == 0, "pinned host allreduce: %s",
         ringrun_last_error());
  EXPECT(f[999] == 2.0f, "pinned host allreduce: wrong result");
  rt().FreeHost(pinned);
}

void report_latency() {
  DeviceBuffer buf(std::vector<char>(4096, 0), 4096);
  for (std::size_t bytes : {std::size_t{4}, std::size_t{4096}}) {
    const int iterations = 200;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) ringrun_allreduce(buf.ptr, buf.ptr, bytes / 4, RINGRUN_FLOAT32, RINGRUN_SUM);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iterations;
    std::printf("device allreduce of %zu B: %.1f us per synchronous call\n", bytes, us);
  }
}

}  // namespace

int main() {
  // One rank, whatever launched the test.
  for (const char* name : {"RINGRUN_RANK", "RINGRUN_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID",
                           "PMI_RANK", "MASTER_ADDR"})
    unsetenv(name);
  int devices = 0;
  cudaError_t probe = cudaErrorNoDevice;
  std::string missing;  // NCCL or the CUDA runtime could not be loaded
  try {
    (void)nccl();
    probe = rt().GetDeviceCount(&devices);
  } catch (const ringrun::RuntimeError& e) {
    missing = e.what();
  }
  if (ringrun_init() != 0) {
    std::fprintf(stderr, "ringrun_init: %s\n", ringrun_last_error());
    return 1;
  }
  if (!missing.empty() || probe != cudaSuccess || devices == 0) {
    // The host path must not be disturbed by a CUDA runtime without a driver or device.
    check_host_buffers("without a CUDA device");
    ringrun_finalize();
    if (g_failures) return 1;
    if (!missing.empty())
      std::printf("SKIP: %s; host collectives in this NCCL build: ok\n", missing.c_str());
    else
      std::printf("SKIP: no CUDA device: cudaGetDeviceCount returned %s (%s), %d device(s); host collectives in "
                  "this NCCL build: ok\n",
                  rt().GetErrorName(probe), rt().GetErrorString(probe), devices);
    return 77;
  }
  std::printf("CUDA device 0 of %d; %s; %s\n", devices, rt().description.c_str(), nccl().description.c_str());
  check_host_buffers("before the first device call");
  check_allreduce();
  check_broadcast_allgather();
  check_errors();
  check_host_buffers("after device calls");
  report_latency();
  if (ringrun_finalize() != 0) {
    std::fprintf(stderr, "ringrun_finalize: %s\n", ringrun_last_error());
    ++g_failures;
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "ok", g_failures);
  return g_failures ? 1 : 0;
}
