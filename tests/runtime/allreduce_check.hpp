// The allreduce check the collectives tests share: every dtype x op at the given sizes against the
// serial reference, with ranks as threads on the given hosts.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "rank_threads.hpp"
#include "reference.hpp"
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

}  // namespace ringrun::test
