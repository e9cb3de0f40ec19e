// One rank of a multi-process test, through the C API only. Started by the process tests (with
// RINGRUN_RANK/SIZE and MASTER_ADDR/PORT) or by plain mpirun (OMPI_* and PMIx).
//   test_rank check   every dtype x op at several sizes against the serial reference; exit 0
//   test_rank die     allreduce in a loop; rank size-2 kills itself (SIGKILL) after a few calls;
//                     the others print "rank R: failed after T ms: <error>" and exit 3
//   test_rank reinit [ROUNDS]
//                     init, check the collectives, finalize, ROUNDS (3) times in one process; after
//                     each finalize the process holds as many threads, descriptors and sockets as
//                     before the first init (runtime_reinit, under ringrun -np 3), or under PMIx
//                     as after the first finalize (runtime_pmix_reinit, under mpirun)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "process_counts.hpp"
#include "reference.hpp"
#include "ringrun/ringrun.h"

using namespace ringrun::test;

// Rank r sends r + 1 int64 values (then, all equal, 2 each): recv holds every rank's block in
// rank order; bad counts are refused with INVALID_ARGUMENT.
static int check_allgatherv(int rank, int n) {
  int failures = 0;
  for (bool uneven : {true, false}) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    std::vector<long long> expected;
    for (int r = 0; r < n; ++r) {
      counts[r] = uneven ? static_cast<std::size_t>(r + 1) : 2;
      for (std::size_t i = 0; i < counts[r]; ++i) expected.push_back(r * 100 + static_cast<long long>(i));
    }
    std::vector<long long> mine;
    for (std::size_t i = 0; i < counts[rank]; ++i) mine.push_back(rank * 100 + static_cast<long long>(i));
    std::vector<long long> recv(expected.size(), -1);
    if (ringrun_allgatherv(mine.data(), mine.size(), RINGRUN_INT64, recv.data(), counts.data(), counts.size()) != 0) {
      std::fprintf(stderr, "rank %d: allgatherv failed: %s\n", rank, ringrun_last_error());
      return 1;
    }
    if (recv != expected) {
      std::fprintf(stderr, "rank %d: allgatherv (%s counts) gathered the wrong values\n", rank, uneven ? "uneven" : "equal");
      ++failures;
    }
    if (ringrun_allgatherv(mine.data(), mine.size() + 1, RINGRUN_INT64, recv.data(), counts.data(), counts.size()) !=
            RINGRUN_ERR_INVALID_ARGUMENT ||
        std::strstr(ringrun_last_error(), "differs from counts[") == nullptr) {
      std::fprintf(stderr, "rank %d: allgatherv accepted a count unlike counts[rank]\n", rank);
      ++failures;
    }
  }
  return failures;
}

static int check() {
  const int rank = ringrun_rank(), n = ringrun_size();
  int failures = 0;
  for (auto dtype : kDtypes)
    for (auto op : kOps)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{(1u << 20) + 3}}) {
        if (count > 100000 && op != RINGRUN_SUM) continue;
        auto data = make_input(rank, count, dtype, op);
        auto expected = reference(n, count, dtype, op);
        if (ringrun_allreduce(data.data(), data.data(), count, dtype, op) != 0) {
          std::fprintf(stderr, "rank %d: allreduce failed: %s\n", rank, ringrun_last_error());
          return 1;
        }
        if (std::memcmp(data.data(), expected.data(), count * ringrun::core::dtype_size(dtype)) != 0) {
          std::fprintf(stderr, "rank %d: wrong result for %s %s count %zu\n", rank, ringrun::core::dtype_name(dtype),
                       ringrun::core::op_name(op), count);
          ++failures;
        }
      }
  std::vector<int> ranks(n, -1);
  int mine = rank;
  if (ringrun_allgather(&mine, 1, RINGRUN_INT32, ranks.data()) != 0 || ringrun_barrier() != 0) {
    std::fprintf(stderr, "rank %d: allgather/barrier failed: %s\n", rank, ringrun_last_error());
    return 1;
  }
  for (int r = 0; r < n; ++r) failures += ranks[r] != r;
  failures += check_allgatherv(rank, n);
  std::printf("rank %d of %d: local %d of %d: %s\n", rank, n, ringrun_local_rank(), ringrun_local_size(),
              failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

static int die() {
  const int rank = ringrun_rank(), n = ringrun_size();
  std::vector<float> data(1 << 20, 1.0f);
  for (int i = 0;; ++i) {
    if (rank == n - 2 && i == 5) ::kill(::getpid(), SIGKILL);
    auto start = std::chrono::steady_clock::now();
    if (ringrun_allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_MAX) != 0) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      std::printf("rank %d: failed after %lld ms: %s\n", rank, static_cast<long long>(ms), ringrun_last_error());
      std::fflush(stdout);
      return 3;
    }
  }
}

// Teardown is complete when a finalized process holds what it held before ringrun_init: then a
// finalize followed by an init (and an elastic reset, built on the same teardown) leaks nothing.
static int reinit(int rounds) {
  ProcessCounts before = process_counts();
  // Under PMIx the process stays connected to the PMIx server from its first ringrun_init until
  // it exits (ringrun(3), DESCRIPTION): that connection's thread and socket count from then on.
  const bool pmix = std::getenv("PMIX_NAMESPACE") && !std::getenv("RINGRUN_STORE_ADDR");
  for (int round = 0; round < rounds; ++round) {
    if (ringrun_init() != 0) {
      std::fprintf(stderr, "round %d: ringrun_init: %s\n", round, ringrun_last_error());
      return 2;
    }
    const int rank = ringrun_rank(), n = ringrun_size();
    double value = rank + 1.0;
    if (ringrun_allreduce(&value, &value, 1, RINGRUN_FLOAT64, RINGRUN_SUM) != 0 || value != n * (n + 1) / 2.0) {
      std::fprintf(stderr, "round %d: rank %d: allreduce gave %g (%s)\n", round, rank, value, ringrun_last_error());
      return 1;
    }
    if (round == 1 && check() != 0) return 1;  // every dtype and op once, in a later communicator
    if (ringrun_finalize() != 0) {
      std::fprintf(stderr, "round %d: ringrun_finalize: %s\n", round, ringrun_last_error());
      return 1;
    }
    const ProcessCounts after = process_counts();
    if (pmix && round == 0) before = after;
    if (after.threads != before.threads || after.fds != before.fds || after.sockets != before.sockets) {
      std::fprintf(stderr, "round %d: rank %d: after finalize %d threads, %d fds, %d sockets; before init %d, %d, %d\n",
                   round, rank, after.threads, after.fds, after.sockets, before.threads, before.fds, before.sockets);
      return 1;
    }
    std::printf("rank %d of %d: round %d: threads %d fds %d sockets %d: ok\n", rank, n, round, after.threads,
                after.fds, after.sockets);
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "reinit") return reinit(argc > 2 ? std::atoi(argv[2]) : 3);
  if (ringrun_init() != 0) {
    std::fprintf(stderr, "ringrun_init: %s\n", ringrun_last_error());
    return 2;
  }
  int rc = mode == "die" ? die() : check();
  if (ringrun_finalize() != 0 && rc == 0) {
    std::fprintf(stderr, "ringrun_finalize: %s\n", ringrun_last_error());
    rc = 1;
  }
  return rc;
}
