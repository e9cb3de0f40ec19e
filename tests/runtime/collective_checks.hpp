// The checks the collectives tests share: an allreduce of every dtype x op at the given sizes
// against the serial reference, with ranks as threads on the given hosts; broadcast, allgather and
// barrier on one rank's communicator; a job that loses a rank.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "rank_threads.hpp"
#include "reference.hpp"
#include "ringrun/runtime.hpp"
#include "sanitizer_build.hpp"

namespace ringrun::test {

// Every dtype x op at the given sizes, ranks on the given hosts; expected_transport: what the
// communicators must report (null: anything).
inline void check_allreduce_on(const std::vector<std::string>& hosts, const std::vector<std::size_t>& sizes,
                               const char* expected_transport = nullptr, RankOptions options = {}) {
  const int n = static_cast<int>(hosts.size());
  // References once per case, shared by all rank threads.
  struct Case {
    ringrun_dtype dtype;
    ringrun_op op;
    std::size_t count;
    std::vector<char> expected;
  };
  std::vector<Case> cases;
  for (auto dtype : kDtypes)
    for (auto op : kOps)
      for (auto count : sizes) {
        // The largest size runs for every dtype with sum and average, and for every op on float32.
        if (count > 100000 && !(op == RINGRUN_SUM || op == RINGRUN_AVERAGE || dtype == RINGRUN_FLOAT32)) continue;
#ifdef RINGRUN_TEST_TSAN
        // Under TSan only float32 sum and average: the same transfers, rounds and synchronisation
        // (what TSan checks) at a sixth of the instrumented reduce loops. The other builds check
        // every dtype's arithmetic at that size.
        if (count > 100000 && !(dtype == RINGRUN_FLOAT32 && (op == RINGRUN_SUM || op == RINGRUN_AVERAGE))) continue;
#endif
        cases.push_back({dtype, op, count, reference(n, count, dtype, op)});
      }
  test::run_ranks_on(hosts, [&](int rank, core::Communicator& comm) {
    if (expected_transport) CHECK(std::string(comm.transport_name()) == expected_transport);
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      auto input = make_input(rank, k.count, k.dtype, k.op);
      const std::size_t bytes = k.count * core::dtype_size(k.dtype);
      const bool in_place = c % 2 == 0;
      std::vector<char> output(bytes + 1, '\x5a');
      if (in_place) {
        comm.allreduce(input.data(), input.data(), k.count, k.dtype, k.op);
        output.assign(input.begin(), input.begin() + static_cast<long>(bytes));
        output.push_back('\x5a');
      } else {
        comm.allreduce(input.data(), output.data(), k.count, k.dtype, k.op);
      }
      INFO("rank ", rank, " of ", n, ", ", core::dtype_name(k.dtype), " ", core::op_name(k.op), ", count ", k.count,
           in_place ? ", in place" : "");
      bool equal = std::memcmp(output.data(), k.expected.data(), bytes) == 0;
      if (!equal) {
        static std::mutex m;
        std::lock_guard lock(m);
        FAIL_CHECK("allreduce result differs from the serial reference");
      }
      if (!in_place) CHECK(output[bytes] == '\x5a');  // nothing written past the end
    }
    // A rank that returns first must not reset connections its peers still read the last ring
    // steps from (the destructor's close is abortive, like a crash).
    comm.finalize();
  }, options);
}


// On every rank of comm (n ranks), for each count: a broadcast from every root_step-th root, an
// allgather and a barrier, each result checked.
inline void check_broadcast_allgather_barrier(core::Communicator& comm, int rank, int n,
                                              const std::vector<std::size_t>& counts, int root_step = 1) {
  for (std::size_t count : counts) {
    for (int root = 0; root < n; root += root_step) {
      std::vector<std::int32_t> buf(count);
      for (std::size_t i = 0; i < count; ++i) buf[i] = rank == root ? static_cast<std::int32_t>(i * 3 + root) : -1;
      comm.broadcast(buf.data(), count, RINGRUN_INT32, root);
      for (std::size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<std::int32_t>(i * 3 + root)) {
          FAIL_CHECK("broadcast of ", count, " from root ", root, " wrong at ", i, " on rank ", rank);
          break;
        }
    }
    std::vector<std::int64_t> mine(count), all(count * static_cast<std::size_t>(n), -1);
    for (std::size_t i = 0; i < count; ++i) mine[i] = rank * 1000003 + static_cast<std::int64_t>(i);
    comm.allgather(mine.data(), count, RINGRUN_INT64, all.data());
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        if (all[static_cast<std::size_t>(r) * count + i] != r * 1000003 + static_cast<std::int64_t>(i)) {
          FAIL_CHECK("allgather block ", r, " of ", count, " wrong at ", i, " on rank ", rank);
          r = n;
          break;
        }
    comm.barrier();
  }
}

// Ranks as threads on hosts run step(comm, i) for i = 0, 1, ... until it throws; rank `drops`
// aborts before its step 3 instead (what a crash looks like to the others: every connection
// closes). Returns each rank's error message and the seconds its failing step took; each error
// must be RINGRUN_ERR_PEER.
struct DropOutcome {
  std::vector<std::string> messages;
  std::vector<double> seconds;
};
inline DropOutcome run_until_one_drops(const std::vector<std::string>& hosts, int drops,
                                       const std::function<void(core::Communicator&, int)>& step) {
  DropOutcome out{std::vector<std::string>(hosts.size()), std::vector<double>(hosts.size())};
  run_ranks_on(hosts, [&](int rank, core::Communicator& comm) {
    const auto r = static_cast<std::size_t>(rank);
    for (int i = 0;; ++i) {
      if (rank == drops && i == 3) {
        comm.abort();
        return;
      }
      auto start = std::chrono::steady_clock::now();
      try {
        step(comm, i);
      } catch (const RuntimeError& e) {
        out.seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        out.messages[r] = e.what();
        CHECK(e.code() == RINGRUN_ERR_PEER);
        return;
      }
    }
  });
  return out;
}

}  // namespace ringrun::test
