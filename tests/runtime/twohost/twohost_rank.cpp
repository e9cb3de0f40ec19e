// One rank of the two-host test (twohost_test.sh starts the ranks in two network namespaces),
// through the C API: checks that the runtime sees the job as the environment describes it and uses
// the transport TWOHOST_TRANSPORT names, then by TWOHOST_MODE:
//   collectives: allreduce (every dtype x op at sizes 0, 1, 7, 1000; 2^20+3 for sum and average)
//     against the serial reference, broadcast from every root, allgather, barrier;
//   mismatch: rank 2 allreduces 99999 elements, the others 100000 (the hierarchical path's sizes):
//     every rank must report it;
//   death: rank 2 exits with 9 in its fourth allreduce; every other rank must fail within 5 s,
//     naming it.
// Exit 0 when all is as expected.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../reference.hpp"
#include "ringrun/ringrun.h"

using namespace ringrun::test;
using ringrun::core::dtype_name;
using ringrun::core::dtype_size;
using ringrun::core::op_name;

namespace {

int g_failures = 0;
int g_rank = -1;

void fail(const std::string& what) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
  ++g_failures;
}

bool call(int rc, const std::string& what) {
  if (rc == 0) return true;
  fail(what + ": " + ringrun_last_error());
  return false;
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

const std::size_t kCounts[] = {0, 1, 7, 1000, (1u << 20) + 3};

// Every rank must fail its allreduce with the mismatch, naming the 99999.
void check_mismatch(int rank) {
  std::vector<float> data(100000, 1.0f);
  call(ringrun_allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM), "first allreduce");
  int rc = ringrun_allreduce(data.data(), data.data(), rank == 2 ? 99999 : 100000, RINGRUN_FLOAT32, RINGRUN_SUM);
  const std::string message = ringrun_last_error();
  std::printf("rank %d: %s\n", rank, message.c_str());
  if (rc != RINGRUN_ERR_MISMATCH || message.find("disagree") == std::string::npos ||
      message.find("99999") == std::string::npos)
    fail("expected a mismatch naming 99999, got code " + std::to_string(rc) + ": " + message);
}

// Rank 2 dies in its fourth allreduce (a crash: the kernel resets its connections); every other
// rank must fail within 5 s with RINGRUN_ERR_PEER naming it.
void check_death(int rank) {
  std::vector<float> data((1u << 20) + 3, 1.0f);
  for (int i = 0; i < 1000; ++i) {
    if (rank == 2 && i == 3) _exit(9);
    auto start = std::chrono::steady_clock::now();
    int rc = ringrun_allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_MAX);
    if (rc == 0) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string message = ringrun_last_error();
    std::printf("rank %d: failed after %.3f s: %s\n", rank, seconds, message.c_str());
    if (rc != RINGRUN_ERR_PEER || message.find("rank 2 (host rrt-host-b)") == std::string::npos || seconds >= 5.0)
      fail("expected RINGRUN_ERR_PEER naming rank 2 within 5 s");
    return;
  }
  fail("1000 allreduces succeeded although rank 2 died");
}

// Every collective on every dtype and size the test covers, checked against the reference.
void check_collectives(int rank, int n) {
  for (auto dtype : kDtypes)
    for (auto op : kOps)
      for (std::size_t count : kCounts) {
        if (count > 100000 && op != RINGRUN_SUM && op != RINGRUN_AVERAGE) continue;
        const std::string what = std::string("allreduce ") + dtype_name(dtype) + " " + op_name(op) + " of " +
                                 std::to_string(count);
        auto data = make_input(rank, count, dtype, op);
        auto expected = reference(n, count, dtype, op);
        std::vector<char> out(data.size());
        if (!call(ringrun_allreduce(data.data(), out.data(), count, dtype, op), what)) continue;
        if (std::memcmp(out.data(), expected.data(), count * dtype_size(dtype)) != 0) fail(what + ": wrong result");
        if (!call(ringrun_allreduce(data.data(), data.data(), count, dtype, op), what + " in place")) continue;
        if (std::memcmp(data.data(), expected.data(), count * dtype_size(dtype)) != 0)
          fail(what + " in place: wrong result");
      }

  for (int root = 0; root < n; ++root)
    for (auto dtype : {RINGRUN_FLOAT32, RINGRUN_BFLOAT16, RINGRUN_INT64, RINGRUN_UINT8})
      for (std::size_t count : kCounts) {
        const std::string what = "broadcast from " + std::to_string(root) + " of " + std::to_string(count) + " " +
                                 dtype_name(dtype);
        auto data = make_input(rank, count, dtype, RINGRUN_SUM);
        auto expected = make_input(root, count, dtype, RINGRUN_SUM);
        if (!call(ringrun_broadcast(data.data(), count, dtype, root), what)) continue;
        if (std::memcmp(data.data(), expected.data(), count * dtype_size(dtype)) != 0) fail(what + ": wrong result");
      }

  for (auto dtype : {RINGRUN_FLOAT64, RINGRUN_FLOAT16, RINGRUN_INT32})
    for (std::size_t count : kCounts) {
      const std::string what = "allgather of " + std::to_string(count) + " " + dtype_name(dtype);
      const std::size_t bytes = count * dtype_size(dtype);
      auto mine = make_input(rank, count, dtype, RINGRUN_SUM);
      std::vector<char> all(bytes * static_cast<std::size_t>(n) + 1), expected(all.size());
      for (int r = 0; r < n; ++r) {
        auto part = make_input(r, count, dtype, RINGRUN_SUM);
        if (bytes) std::memcpy(expected.data() + bytes * static_cast<std::size_t>(r), part.data(), bytes);
      }
      if (!call(ringrun_allgather(mine.data(), count, dtype, all.data()), what)) continue;
      if (std::memcmp(all.data(), expected.data(), bytes * static_cast<std::size_t>(n)) != 0)
        fail(what + ": wrong result");
    }
}

}  // namespace

int main() {
  if (ringrun_init() != 0) {
    std::fprintf(stderr, "ringrun_init: %s\n", ringrun_last_error());
    return 2;
  }
  const int rank = g_rank = ringrun_rank(), n = ringrun_size();
  // The runtime's view of the job, from the peers' host names, against what the test set.
  const int seen[] = {ringrun_size(), ringrun_local_rank(), ringrun_local_size(), ringrun_cross_rank(),
                      ringrun_cross_size()};
  const char* names[] = {"RINGRUN_SIZE", "RINGRUN_LOCAL_RANK", "RINGRUN_LOCAL_SIZE", "RINGRUN_CROSS_RANK",
                         "RINGRUN_CROSS_SIZE"};
  for (int i = 0; i < 5; ++i)
    if (seen[i] != env_int(names[i]))
      fail(std::string(names[i]) + "=" + std::to_string(env_int(names[i])) + " but the runtime computed " +
           std::to_string(seen[i]));

  const char* expected_transport = std::getenv("TWOHOST_TRANSPORT");
  const char* transport = ringrun_transport_name();
  if (expected_transport && (!transport || std::string(transport) != expected_transport))
    fail(std::string("transport ") + (transport ? transport : "(null)") + ", expected " + expected_transport);
  const std::string mode = std::getenv("TWOHOST_MODE") ? std::getenv("TWOHOST_MODE") : "collectives";
  if (mode == "mismatch" || mode == "death") {
    if (mode == "mismatch") check_mismatch(rank);
    else check_death(rank);
    ringrun_finalize();  // fails after the error; closes the connections either way
    std::printf("rank %d of %d, transport %s, %s: %s\n", rank, n, transport ? transport : "(null)", mode.c_str(),
                g_failures ? "FAILED" : "ok");
    return g_failures ? 1 : 0;
  }

  check_collectives(rank, n);
  call(ringrun_barrier(), "barrier");

  // Every rank's verdict, so that each rank's output says whether the whole job passed.
  int mine = g_failures, total = 0;
  call(ringrun_allreduce(&mine, &total, 1, RINGRUN_INT32, RINGRUN_SUM), "allreduce of the failure counts");
  if (!call(ringrun_finalize(), "finalize")) total += 1;
  std::printf("rank %d of %d (local %d of %d, cross %d of %d, transport %s): %s\n", rank, n, seen[1], seen[2],
              seen[3], seen[4], transport ? transport : "(null)",
              g_failures ? "FAILED" : total ? "ok here, failures elsewhere" : "ok");
  return g_failures || total ? 1 : 0;
}
