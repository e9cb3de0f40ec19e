// Several hosts with several ranks each, as threads: the hierarchical transport (shared memory
// within a host, TCP between hosts) against the serial reference, its mismatches and a death.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "collective_checks.hpp"
#include "rank_threads.hpp"
#include "ringrun/runtime.hpp"

using namespace ringrun;
using core::Communicator;
using test::check_allreduce_on;

// Several hosts with several ranks each: shared memory within a host, TCP between hosts.
TEST_CASE("hierarchical allreduce: 2x2, 2x3 and 3x2 hosts x ranks, every dtype and op against the reference") {
  // Up to 16 KiB the data rides with the header steps (a shared-memory round, then recursive
  // doubling across hosts; 3000 and 4096 float32 beyond the shared-memory transport's own direct
  // path); 4097 float32 (16388 bytes) is the smallest reduce-scatter case for 4-byte types, and
  // 4097 and 16411 are not divisible by 2 or 3 ranks per host. 4 hosts: a cross group of 4.
  const std::vector<std::size_t> sizes = {0, 1, 2, 7, 1000, 3000, 4096, 4097, 16411, (1u << 20) + 3};
  for (auto layout : {std::vector<int>{2, 2}, std::vector<int>{3, 3}, std::vector<int>{2, 2, 2},
                      std::vector<int>{2, 2, 2, 2}}) {
    INFO(layout.size(), " hosts x ", layout[0], " ranks");
    check_allreduce_on(test::hosts_of_blocks(layout), sizes, "shm+tcp");
  }
}

TEST_CASE("hierarchical allreduce: a tiny shared-memory ring, many reduce-scatter chunks per call") {
  // 4 KiB ring chunks: the first phase takes dozens of chunks whose pieces of the last (larger)
  // block run past the others' blocks; 2 and 3 ranks per host. 4 KiB slots: 3000 elements no
  // longer fit one, so small allreduces take the reduce-scatter too.
  for (auto layout : {std::vector<int>{2, 2}, std::vector<int>{3, 3}}) {
    INFO(layout.size(), " hosts x ", layout[0], " ranks");
    check_allreduce_on(test::hosts_of_blocks(layout), {7, 1000, 3000, 4097, 16411, 100003}, "shm+tcp",
                       {.shm_slot_bytes = 4096});
  }
}

TEST_CASE("hierarchical: ranks of a host need not be consecutive") {
  // Round-robin placement: hosts a b a b a b.
  check_allreduce_on({"nodeA", "nodeB", "nodeA", "nodeB", "nodeA", "nodeB"}, {7, 16411, 300007}, "shm+tcp");
}

TEST_CASE("hierarchical broadcast, allgather and barrier: 2x2, 3x3, 3x2 and 4x2 hosts x ranks") {
  for (auto layout : {std::vector<int>{2, 2}, std::vector<int>{3, 3, 3}, std::vector<int>{2, 2, 2},
                      std::vector<int>{2, 2, 2, 2}}) {
    const auto hosts = test::hosts_of_blocks(layout);
    const int n = static_cast<int>(hosts.size());
    INFO(layout.size(), " hosts x ", layout[0], " ranks");
    test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
      CHECK(std::string(comm.transport_name()) == "shm+tcp");
      test::check_broadcast_allgather_barrier(comm, rank, n, {0, 1, 7, 4097, 300001});
      comm.finalize();
    });
  }
}

TEST_CASE("uneven hosts (3 ranks + 1) fall back to flat TCP and stay correct") {
  check_allreduce_on(test::hosts_of_blocks({3, 1}), {0, 1, 7, 1000, 16411, (1u << 20) + 3}, "tcp");
}

TEST_CASE("hierarchical: mismatches are reported on every rank, whichever host disagrees") {
  // A different count on one rank, a different op on one rank (the phases combine with SUM either
  // way, so only the header exchange can see it), and a different kind of collective; all large
  // enough for the hierarchical path.
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    std::vector<std::string> messages(4);
    test::run_ranks_on(test::hosts_of_blocks({2, 2}), [&](int rank, Communicator& comm) {
      std::vector<float> data(100000, 1.0f);
      comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM);
      try {
        if (variant == 0) {
          comm.allreduce(data.data(), data.data(), rank == 2 ? 99999 : 100000, RINGRUN_FLOAT32, RINGRUN_SUM);
        } else if (variant == 1) {
          comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32,
                         rank == 3 ? RINGRUN_AVERAGE : RINGRUN_SUM);
        } else if (rank == 1) {
          comm.broadcast(data.data(), data.size(), RINGRUN_FLOAT32, 0);
        } else {
          comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM);
        }
        messages[rank] = "no error";
      } catch (const RuntimeError& e) {
        CHECK(e.code() == RINGRUN_ERR_MISMATCH);
        messages[rank] = e.what();
      }
    });
    const char* expected[] = {"99999", "average", "broadcast"};
    for (int r = 0; r < 4; ++r) {
      INFO("rank ", r, ": ", messages[r]);
      CHECK(messages[r].find("disagree") != std::string::npos);
      CHECK(messages[r].find(expected[variant]) != std::string::npos);
    }
  }
}

TEST_CASE("hierarchical: mismatches on the small path reach every rank, within a host or between hosts") {
  // 2, 3 and 4 hosts x 2 ranks; the odd rank out is local index 1 of the first host or the last
  // rank. Each variant's calls begin with the same host round and cross-host doubling, whichever
  // path their sizes take: a count within a host, an op within a host (both found by the host
  // round), hosts that agree within but not with each other (found across), a small allreduce
  // against a large one, a barrier or an allgather, and a count at 8-16 KiB.
  for (int hosts : {2, 3, 4}) {
    const int n = 2 * hosts;
    for (int odd : {1, n - 1}) {
      for (int variant = 0; variant < 7; ++variant) {
        CAPTURE(hosts);
        CAPTURE(odd);
        CAPTURE(variant);
        std::vector<std::string> messages(static_cast<std::size_t>(n));
        test::run_ranks_on(test::hosts_of_blocks(std::vector<int>(static_cast<std::size_t>(hosts), 2)),
                           [&](int rank, Communicator& comm) {
          std::vector<float> data(100000, 1.0f);
          std::vector<float> all(100000 * static_cast<std::size_t>(n));
          comm.allreduce(data.data(), data.data(), 10, RINGRUN_FLOAT32, RINGRUN_SUM);
          auto small = [&](std::size_t count, ringrun_op op) {
            comm.allreduce(data.data(), data.data(), count, RINGRUN_FLOAT32, op);
          };
          try {
            const bool me = rank == odd;
            if (variant == 0) small(me ? 99 : 100, RINGRUN_SUM);
            else if (variant == 1) small(100, me ? RINGRUN_AVERAGE : RINGRUN_SUM);
            else if (variant == 2) small(rank < 2 ? 101 : 100, RINGRUN_SUM);
            else if (variant == 3) small(me ? 100 : data.size(), RINGRUN_SUM);
            else if (variant == 4 && me) comm.barrier();
            else if (variant == 5 && me) comm.allgather(data.data(), 100, RINGRUN_FLOAT32, all.data());
            else if (variant == 6) small(me ? 3000 : 3001, RINGRUN_SUM);
            else small(100, RINGRUN_SUM);
            messages[static_cast<std::size_t>(rank)] = "no error";
          } catch (const RuntimeError& e) {
            CHECK(e.code() == RINGRUN_ERR_MISMATCH);
            messages[static_cast<std::size_t>(rank)] = e.what();
          }
        });
        const char* expected[] = {"of 99 ", "average", "of 101 ", "100000", "barrier", "allgather", "of 3000 "};
        for (int r = 0; r < n; ++r) {
          INFO("rank ", r, ": ", messages[static_cast<std::size_t>(r)]);
          CHECK(messages[static_cast<std::size_t>(r)].find("disagree") != std::string::npos);
          CHECK(messages[static_cast<std::size_t>(r)].find(expected[variant]) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("hierarchical: a rank that drops out on another host makes every rank fail within 5 s, naming it") {
  const auto outcome = test::run_until_one_drops(test::hosts_of_blocks({2, 2}), 2, [](Communicator& comm, int i) {
    std::vector<float> data((1 << 20) + 3, 1.0f);
    comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_MAX);
    comm.broadcast(data.data(), 1000, RINGRUN_FLOAT32, i % 4);
    comm.allreduce(data.data(), data.data(), 100, RINGRUN_FLOAT32, RINGRUN_MAX);
    comm.barrier();
  });
  for (int r : {0, 1, 3}) {
    INFO("rank ", r, ": ", outcome.messages[static_cast<std::size_t>(r)]);
    CHECK(outcome.messages[static_cast<std::size_t>(r)].find("rank 2 (host node1)") != std::string::npos);
    CHECK(outcome.seconds[static_cast<std::size_t>(r)] < 5.0);
  }
}
