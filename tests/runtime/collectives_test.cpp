// Collectives with ranks as threads, against a serial reference: every dtype x op, sizes 0, 1,
// 7, 1000 and 2^20+3, 1 to 8 ranks (oversubscribed on purpose), over TCP and shared memory (the
// hierarchical transport: hierarchical_test.cpp).
// Inputs are small integers, so every reduction order gives the same, exactly representable
// result and the comparison is bit for bit.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>
#include <tuple>

#include "collective_checks.hpp"
#include "core/dtype.hpp"
#include "rank_threads.hpp"
#include "reference.hpp"
#include "ringrun/runtime.hpp"
#include "sanitizer_build.hpp"

using namespace ringrun;
using core::Communicator;
using core::PeerInfo;
using core::automatic_tcp_streams;
using test::Placement;
using test::kDtypes;
using test::kOps;
using test::make_input;
using test::reference;
using test::check_allreduce_on;

namespace {

void check_allreduce_everything(int n, Placement placement, const std::vector<std::size_t>& sizes) {
  check_allreduce_on(test::hosts_for(n, placement), sizes);
}

}  // namespace

TEST_CASE("fp16 and bf16 conversions") {
  using namespace core;
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);  // rounds up to infinity
  CHECK(float_to_half(65519.0f) == 0x7bff);
  CHECK(float_to_half(5.9604644775390625e-8f) == 0x0001);  // smallest subnormal
  CHECK(float_to_half(0.1f) == 0x2e66);
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3c00);  // tie rounds to even
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(bfloat16_to_float(0x4049) == doctest::Approx(3.140625));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan) continue;
    if (float_to_half(half_to_float(static_cast<std::uint16_t>(h))) != h) {
      FAIL_CHECK("half round trip fails for ", h);
      break;
    }
  }
}

TEST_CASE("allreduce: every dtype and op against the serial reference, 1 to 8 ranks, TCP and shm") {
  const std::vector<std::size_t> small = {0, 1, 7, 1000};
  const std::vector<std::size_t> all = {0, 1, 7, 1000, (1u << 20) + 3};
  for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
    for (int n = 1; n <= 8; ++n) {
      CAPTURE(n);
      INFO(test::placement_name(placement));
      check_allreduce_everything(n, placement, (n <= 4 || n == 8) ? all : small);
    }
  }
}

TEST_CASE("allreduce: shared memory around the streamed path's thresholds, every dtype") {
  // Inline inputs: 32 bytes in the post line, 60 more a line, 2132 in all (counts on both sides of
  // each for 1-, 2-, 4- and 8-byte elements), then the slot; 8 KiB (latency path to streamed), odd
  // counts that leave partial chunks and shards, and 8 MiB + 20 bytes of float32 (non-temporal
  // output stores).
  const std::vector<std::size_t> sizes = {4, 5, 8, 9, 11, 22, 23, 32, 33, 88, 89, 266, 267, 533, 534, 1066, 1067,
                                          2048, 2049, 2132, 2133, 4095, 4096, 4097, 8193, 16411, 65537, (1u << 21) + 5};
  for (int n : {2, 3}) {
    CAPTURE(n);
    check_allreduce_everything(n, Placement::one_host, sizes);
  }
}

TEST_CASE("allreduce_scattered: tensors read and written in place as one allreduce, every dtype and op") {
  // The engine's fusion without a fusion buffer: the concatenation of uneven spans (one empty,
  // some in place, each its own allocation) must equal one allreduce of the concatenated input.
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    test::run_ranks(n, Placement::one_host, [&](int rank, Communicator& comm) {
      REQUIRE(comm.can_allreduce_scattered());
      for (auto dtype : kDtypes)
        for (auto op : kOps)
          for (std::size_t count : {std::size_t{7}, std::size_t{5003}, std::size_t{(1u << 20) + 3}}) {
            if (count > 100000 && !(dtype == RINGRUN_FLOAT32 && (op == RINGRUN_SUM || op == RINGRUN_AVERAGE || op == RINGRUN_MAX))) continue;
            const std::size_t esize = core::dtype_size(dtype);
            auto input = make_input(rank, count, dtype, op);
            auto expected = reference(n, count, dtype, op);
            // Span sizes in elements: 1, 0, 13, 2, 997, ... until count is used up.
            std::vector<std::size_t> sizes;
            for (std::size_t used = 0, k = 0; used < count; ++k) {
              std::size_t want = k == 1 ? 0 : (k * 997 + 1) % (count / 3 + 2);
              want = std::min(want, count - used);
              sizes.push_back(want);
              used += want;
            }
            std::vector<std::vector<char>> sends, recvs;
            std::vector<core::BufferSpan> spans;
            std::size_t at = 0;
            for (std::size_t k = 0; k < sizes.size(); ++k) {
              const std::size_t bytes = sizes[k] * esize;
              sends.emplace_back(input.begin() + static_cast<long>(at), input.begin() + static_cast<long>(at + bytes));
              recvs.emplace_back(bytes + 1, '\x5a');
              const bool in_place = k % 3 == 2;
              spans.push_back({sends.back().data(), in_place ? sends.back().data() : recvs.back().data(), bytes});
              at += bytes;
            }
            comm.allreduce_scattered(spans, dtype, op);
            std::vector<char> got;
            for (std::size_t k = 0; k < spans.size(); ++k) {
              const char* out = static_cast<const char*>(spans[k].recv);
              got.insert(got.end(), out, out + spans[k].bytes);
              if (spans[k].recv == recvs[k].data() && recvs[k].back() != '\x5a') FAIL_CHECK("wrote past span ", k);
            }
            expected.resize(count * esize);  // reference() leaves a guard byte at the end
            if (got != expected) {
              static std::mutex m;
              std::lock_guard lock(m);
              FAIL_CHECK("rank ", rank, ": scattered allreduce of ", count, " ", core::dtype_name(dtype), " ",
                         core::op_name(op), " in ", spans.size(), " spans differs from the serial reference");
            }
          }
    });
  }
}

TEST_CASE("broadcast and allgather: shared memory around the streamed path's thresholds") {
  for (int n : {2, 3}) {
    test::run_ranks(n, Placement::one_host, [&](int rank, Communicator& comm) {
      for (std::size_t count : {std::size_t{4095}, std::size_t{4097}, std::size_t{65537}, std::size_t{(1u << 21) + 3}}) {
        for (int root = 0; root < n; ++root) {
          std::vector<std::int32_t> buf(count, -1);
          if (rank == root)
            for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<std::int32_t>(i * 7 + root);
          comm.broadcast(buf.data(), count, RINGRUN_INT32, root);
          for (std::size_t i = 0; i < count; ++i)
            if (buf[i] != static_cast<std::int32_t>(i * 7 + root)) {
              FAIL_CHECK("broadcast of ", count, " from root ", root, " wrong at ", i, " on rank ", rank);
              break;
            }
        }
        std::vector<std::int32_t> mine(count), all(count * n + 1, -1);
        for (std::size_t i = 0; i < count; ++i) mine[i] = rank * 1000003 + static_cast<std::int32_t>(i);
        comm.allgather(mine.data(), count, RINGRUN_INT32, all.data());
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i)
            if (all[r * count + i] != r * 1000003 + static_cast<std::int32_t>(i)) {
              FAIL_CHECK("allgather of ", count, ": block ", r, " wrong at ", i, " on rank ", rank);
              r = n;
              break;
            }
        CHECK(all[count * n] == -1);  // nothing written past the end
      }
    });
  }
}

TEST_CASE("allreduce: shared memory with a tiny slot takes many pipelined rounds") {
  for (int n : {2, 3, 5}) {
    test::run_ranks(n, Placement::one_host, [&](int rank, Communicator& comm) {
      std::vector<float> data(100003);
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((i + rank) % 11);
      comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM);
      for (std::size_t i = 0; i < data.size(); i += 997) {
        float expected = 0;
        for (int r = 0; r < n; ++r) expected += static_cast<float>((i + r) % 11);
        REQUIRE(data[i] == expected);
      }
    }, 4096);
  }
}

TEST_CASE("broadcast, allgather and barrier") {
  for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
    for (int n : {1, 2, 3, 5, 8}) {
      INFO(test::placement_name(placement), ", ", n, " ranks");
      test::run_ranks(n, placement, [&](int rank, Communicator& comm) {
        test::check_broadcast_allgather_barrier(comm, rank, n, {0, 1, 7, 1000, 300001}, n > 3 ? 3 : 1);
        comm.finalize();
      });
    }
  }
}

TEST_CASE("mismatched counts, dtypes or ops are reported on every rank") {
  for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
    INFO(test::placement_name(placement));
    std::vector<std::string> messages(4);
    test::run_ranks(4, placement, [&](int rank, Communicator& comm) {
      std::vector<float> data(1000, 1.0f);
      comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM);
      std::size_t count = rank == 2 ? 999 : 1000;
      try {
        comm.allreduce(data.data(), data.data(), count, RINGRUN_FLOAT32, RINGRUN_SUM);
        messages[rank] = "no error";
      } catch (const RuntimeError& e) {
        CHECK(e.code() == RINGRUN_ERR_MISMATCH);
        messages[rank] = e.what();
      }
      // The communicator stays unusable, with the first error.
      CHECK_THROWS_AS(comm.barrier(), RuntimeError);
    });
    for (int r = 0; r < 4; ++r) {
      INFO("rank ", r, ": ", messages[r]);
      CHECK(messages[r].find("disagree") != std::string::npos);
      CHECK(messages[r].find("999") != std::string::npos);
    }
  }
}

TEST_CASE("recursive doubling: mismatches reach every rank, whichever member disagrees and however") {
  // 5 and 7 ranks: members 4.. fold into 0.. (the odd rank out is such a member or not); the
  // variants: a different count on a small allreduce (data rides with the check), a large
  // allreduce (header check only, then the ring) against small ones, a barrier against them.
  for (int n : {5, 7}) {
    for (int odd : {1, n - 1}) {
      for (int variant = 0; variant < 3; ++variant) {
        CAPTURE(n);
        CAPTURE(odd);
        CAPTURE(variant);
        std::vector<std::string> messages(static_cast<std::size_t>(n));
        test::run_ranks(n, Placement::separate_hosts, [&](int rank, Communicator& comm) {
          std::vector<float> data(100000, 1.0f);
          comm.allreduce(data.data(), data.data(), 10, RINGRUN_FLOAT32, RINGRUN_SUM);
          try {
            if (rank != odd) comm.allreduce(data.data(), data.data(), 1000, RINGRUN_FLOAT32, RINGRUN_SUM);
            else if (variant == 0) comm.allreduce(data.data(), data.data(), 999, RINGRUN_FLOAT32, RINGRUN_SUM);
            else if (variant == 1) comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_SUM);
            else comm.barrier();
            messages[static_cast<std::size_t>(rank)] = "no error";
          } catch (const RuntimeError& e) {
            CHECK(e.code() == RINGRUN_ERR_MISMATCH);
            messages[static_cast<std::size_t>(rank)] = e.what();
          }
        });
        const char* expected[] = {"999", "100000", "barrier"};
        for (int r = 0; r < n; ++r) {
          INFO("rank ", r, ": ", messages[static_cast<std::size_t>(r)]);
          CHECK(messages[static_cast<std::size_t>(r)].find("disagree") != std::string::npos);
          CHECK(messages[static_cast<std::size_t>(r)].find(expected[variant]) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("invalid arguments fail on the calling rank only and leave the communicator usable") {
  test::run_ranks(2, Placement::one_host, [&](int rank, Communicator& comm) {
    float x = 1;
    CHECK_THROWS_AS(comm.allreduce(&x, &x, 1, static_cast<ringrun_dtype>(15) /* invalid, yet inside the enum's range (0..15): 42 would be UB in C++ (UBSan) */, RINGRUN_SUM), RuntimeError);
    CHECK_THROWS_AS(comm.allreduce(nullptr, &x, 1, RINGRUN_FLOAT32, RINGRUN_SUM), RuntimeError);
    CHECK_THROWS_AS(comm.broadcast(&x, 1, RINGRUN_FLOAT32, 5), RuntimeError);
    comm.allreduce(&x, &x, 1, RINGRUN_FLOAT32, RINGRUN_SUM);
    CHECK(x == 2);
    CHECK(comm.world().local_size == 2);
    CHECK(comm.world().local_rank == rank);
    CHECK(std::string(comm.transport_name()) == "shm");
  });
}

TEST_CASE("a rank that drops out mid-job makes every other rank fail within 5 s, naming it") {
  for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
    INFO(test::placement_name(placement));
    const auto outcome = test::run_until_one_drops(test::hosts_for(4, placement), 2, [](Communicator& comm, int) {
      std::vector<float> data((1 << 20) + 3, 1.0f);
      comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_MAX);
    });
    const auto& messages = outcome.messages;
    for (int r : {0, 1, 3}) {
      INFO("rank ", r, ": ", messages[r], " | all: ", messages[0], " | ", messages[1], " | ", messages[3]);
      CHECK(messages[r].find("rank 2 (host node") != std::string::npos);
      CHECK(outcome.seconds[static_cast<std::size_t>(r)] < 5.0);
    }
  }
}

TEST_CASE("recursive doubling: a rank that drops out is seen by every rank, not only through its partners") {
  // 8 ranks, small allreduces (doubling): the ranks that fail keep their communicators open for a
  // while, as a program that catches the error would, so a rank that learnt of the death only when
  // a failed partner closed would wait that long.
  constexpr int kRanks = 8;
  std::vector<std::string> messages(kRanks);
  std::vector<double> seconds(kRanks);
  test::run_ranks(kRanks, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    float x = 1.0f;
    for (int i = 0;; ++i) {
      if (rank == 5 && i == 3) {
        comm.abort();  // what a crash looks like to the others: every connection resets
        return;
      }
      auto start = std::chrono::steady_clock::now();
      try {
        comm.allreduce(&x, &x, 1, RINGRUN_FLOAT32, RINGRUN_MAX);
      } catch (const RuntimeError& e) {
        const auto took = std::chrono::steady_clock::now() - start;
        seconds[static_cast<std::size_t>(rank)] = std::chrono::duration<double>(took).count();
        messages[static_cast<std::size_t>(rank)] = e.what();
        CHECK(e.code() == RINGRUN_ERR_PEER);
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return;
      }
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r == 5) continue;
    INFO("rank ", r, ": ", messages[static_cast<std::size_t>(r)]);
    CHECK(messages[static_cast<std::size_t>(r)].find("rank 5 (host node") != std::string::npos);
    CHECK(seconds[static_cast<std::size_t>(r)] < 2.0);
  }
}

// RINGRUN_TCP_STREAMS: large ring steps, broadcasts and allgather blocks striped across 3
// connections per peer (pieces of at least 64 KiB, so the 2^20+3 and 300007 sizes stripe).
TEST_CASE("TCP streams: 3 connections per peer, flat and hierarchical, against the reference") {
  const std::vector<std::size_t> sizes = {0, 1, 7, 1000, 16411, 300007, (1u << 20) + 3};
  test::RankOptions three{.tcp_streams = 3};
  check_allreduce_on(test::hosts_for(3, Placement::separate_hosts), sizes, "tcp", three);
  check_allreduce_on(test::hosts_of_blocks({2, 2}), sizes, "shm+tcp", three);
  for (auto hosts : {test::hosts_for(3, Placement::separate_hosts), test::hosts_of_blocks({2, 2})}) {
    const int n = static_cast<int>(hosts.size());
    test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
      for (std::size_t count : {std::size_t{7}, std::size_t{65537}, std::size_t{700001}}) {
        for (int root = 0; root < n; ++root) {
          std::vector<std::int32_t> buf(count, -1);
          if (rank == root)
            for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<std::int32_t>(i * 5 + root);
          comm.broadcast(buf.data(), count, RINGRUN_INT32, root);
          for (std::size_t i = 0; i < count; ++i)
            if (buf[i] != static_cast<std::int32_t>(i * 5 + root)) {
              FAIL_CHECK("broadcast of ", count, " from root ", root, " wrong at ", i, " on rank ", rank);
              break;
            }
        }
        std::vector<std::int32_t> mine(count), all(count * n + 1, -1);
        for (std::size_t i = 0; i < count; ++i) mine[i] = rank * 1000003 + static_cast<std::int32_t>(i);
        comm.allgather(mine.data(), count, RINGRUN_INT32, all.data());
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i)
            if (all[r * count + i] != r * 1000003 + static_cast<std::int32_t>(i)) {
              FAIL_CHECK("allgather of ", count, ": block ", r, " wrong at ", i, " on rank ", rank);
              r = n;
              break;
            }
        CHECK(all[count * n] == -1);
      }
      comm.finalize();
    }, three);
  }
}

TEST_CASE("TCP streams: a count outside 0..8 is refused before any connection") {
  for (int streams : {-1, 9}) {
    CAPTURE(streams);
    try {
      test::run_ranks_on({"node0"}, [](int, Communicator&) {}, {.tcp_streams = streams});
      FAIL_CHECK("no error");
    } catch (const RuntimeError& e) {
      CHECK(e.code() == RINGRUN_ERR_INVALID_ARGUMENT);
      CHECK(std::string(e.what()).find("TCP streams") != std::string::npos);
    }
  }
}

// RINGRUN_TCP_STREAMS unset: a connection per CPU each rank has to itself on its machine, 1 to 4.
TEST_CASE("TCP streams: the automatic count follows the CPUs per rank of the most crowded machine") {
  auto peers = [](std::vector<std::tuple<std::string, std::string, int>> ranks) {
    std::vector<PeerInfo> out;
    for (auto& [host, machine, cpus] : ranks) {
      PeerInfo p;
      p.host = host;
      p.machine = machine;
      p.cpus = cpus;
      out.push_back(p);
    }
    return out;
  };
  CHECK(automatic_tcp_streams({}) == 1);
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 64}, {"a", "m1", 64}})) == 1);  // one host: no TCP between hosts
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 64}, {"b", "m2", 64}})) == 4);  // capped
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 2}, {"b", "m2", 2}})) == 2);
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 6}, {"a", "m1", 6}, {"b", "m2", 64}})) == 3);
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 8}, {"b", "m2", 8}, {"b", "m2", 8}, {"b", "m2", 8}})) == 2);
  // Network namespaces of one 2-CPU machine: 4 "hosts", 4 ranks share 2 CPUs.
  CHECK(automatic_tcp_streams(peers({{"a", "m", 2}, {"b", "m", 2}, {"c", "m", 2}, {"d", "m", 2}})) == 1);
  CHECK(automatic_tcp_streams(peers({{"a", "m1", 1}, {"a", "m1", 1}, {"b", "m2", 1}, {"b", "m2", 1}})) == 1);
}

// Shared-memory waits do not spin where the machine has more ranks than CPUs.
TEST_CASE("a machine is oversubscribed when more ranks than its CPUs run on it, namespaces counted together") {
  auto world = [](int rank, std::vector<std::pair<std::string, int>> ranks) {
    core::World w;
    w.rank = rank;
    w.size = static_cast<int>(ranks.size());
    for (auto& [machine, cpus] : ranks) {
      PeerInfo p;
      p.machine = machine;
      p.cpus = cpus;
      w.peers.push_back(p);
    }
    return w;
  };
  CHECK_FALSE(core::machine_oversubscribed(world(0, {{"m", 2}, {"m", 2}})));
  CHECK(core::machine_oversubscribed(world(0, {{"m", 2}, {"m", 2}, {"m", 2}})));
  CHECK_FALSE(core::machine_oversubscribed(world(0, {{"m1", 2}, {"m1", 2}, {"m2", 2}, {"m2", 2}})));
  CHECK(core::machine_oversubscribed(world(3, {{"m1", 8}, {"m2", 1}, {"m1", 8}, {"m2", 1}})));
  CHECK_FALSE(core::machine_oversubscribed(world(0, {{"m1", 8}, {"m2", 1}, {"m1", 8}, {"m2", 1}})));
}

TEST_CASE("TCP streams: unset (0, automatic) connects and runs every collective, flat and hierarchical") {
  const std::vector<std::size_t> sizes = {1, 1000, 300007};
  test::RankOptions automatic{.tcp_streams = 0};
  check_allreduce_on(test::hosts_for(3, Placement::separate_hosts), sizes, "tcp", automatic);
  check_allreduce_on(test::hosts_of_blocks({2, 2}), sizes, "shm+tcp", automatic);
}

TEST_CASE("TCP streams: ranks that disagree on the count all fail at start-up, naming the variable") {
  test::RankOptions options;
  options.tcp_streams_of = [](int rank) { return rank == 1 ? 2 : 1; };
  // No rank gets a communicator (the body never runs); run_ranks_on rethrows rank 0's error.
  try {
    test::run_ranks_on(test::hosts_for(3, Placement::separate_hosts), [](int, Communicator&) {
      FAIL_CHECK("a communicator was created");
    }, options);
    FAIL_CHECK("no error");
  } catch (const RuntimeError& e) {
    CHECK(e.code() == RINGRUN_ERR_BOOTSTRAP);
    INFO(e.what());
    CHECK(std::string(e.what()).find("RINGRUN_TCP_STREAMS differs") != std::string::npos);
    CHECK(std::string(e.what()).find("rank 1 (host node1) uses 2") != std::string::npos);
  }
}
