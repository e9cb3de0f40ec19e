// Adasum (RINGRUN_ADASUM) with ranks as threads: against the serial reference of the same tree in
// double precision (adasum_reference.hpp) for 1 to 8 ranks, over TCP, shared memory and the
// hierarchical transport, float16/bfloat16/float32/float64, lengths odd, even and smaller than the
// rank count; every rank's result the same bits; Horovod's properties (orthogonal tensors sum,
// parallel ones average), on any number of ranks; the refusals, mismatches and a dead peer; and
// through the engine.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "adasum_reference.hpp"
#include "collective_checks.hpp"
#include "core/adasum.hpp"
#include "core/dtype.hpp"
#include "core/reduce_simd.hpp"
#include "engine/engine.hpp"
#include "rank_threads.hpp"
#include "ringrun/runtime.hpp"
#include "sanitizer_build.hpp"

using namespace ringrun;
using core::Communicator;
using test::Placement;
using test::Tensor;

namespace {

const ringrun_dtype kFloatTypes[] = {RINGRUN_FLOAT32, RINGRUN_FLOAT64, RINGRUN_FLOAT16, RINGRUN_BFLOAT16};

struct Case {
  ringrun_dtype dtype;
  std::vector<std::vector<char>> inputs;  // by rank
  Tensor expected;
  std::vector<std::vector<char>> results;  // by rank
};

Case make_case(int n, std::size_t count, ringrun_dtype dtype, unsigned seed) {
  Case c{dtype, {}, {}, std::vector<std::vector<char>>(static_cast<std::size_t>(n))};
  std::vector<Tensor> values;
  for (int r = 0; r < n; ++r) {
    values.push_back(test::random_tensor(r, count, dtype, seed));
    c.inputs.push_back(test::to_bytes(values.back(), dtype));
  }
  c.expected = test::adasum_tree(values);
  return c;
}

// Runs every case on the given hosts (even cases in place), then checks each result against the
// reference and every rank's against rank 0's, bit for bit.
void run_cases(const std::vector<std::string>& hosts, std::vector<Case>& cases, test::RankOptions options = {}) {
  const int n = static_cast<int>(hosts.size());
  test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
    for (std::size_t k = 0; k < cases.size(); ++k) {
      Case& c = cases[k];
      const auto r = static_cast<std::size_t>(rank);
      const std::size_t count = c.expected.size();
      std::vector<char> input = c.inputs[r];
      std::vector<char>& out = c.results[r];
      out.assign(input.size() + 1, '\x5a');  // one guard byte
      if (k % 2 == 0) {
        comm.allreduce(input.data(), input.data(), count, c.dtype, RINGRUN_ADASUM);
        std::copy(input.begin(), input.end(), out.begin());
      } else {
        comm.allreduce(input.data(), out.data(), count, c.dtype, RINGRUN_ADASUM);
      }
    }
    comm.finalize();  // a rank that returns first must not reset connections its peers still read
  }, options);
  for (const Case& c : cases) {
    const std::size_t bytes = c.inputs[0].size();
    INFO(n, " ranks, ", core::dtype_name(c.dtype), ", count ", c.expected.size());
    CHECK(c.results[0][bytes] == '\x5a');
    std::vector<char> got(c.results[0].begin(), c.results[0].begin() + static_cast<long>(bytes));
    const double error = test::relative_error(test::from_bytes(got, c.dtype), c.expected);
    CHECK(error <= test::adasum_tolerance(c.dtype, n));
    for (int r = 1; r < n; ++r)
      CHECK(std::equal(got.begin(), got.end(), c.results[static_cast<std::size_t>(r)].begin()));
  }
}

void check_against_reference(const std::vector<std::string>& hosts, const std::vector<std::size_t>& counts,
                             test::RankOptions options = {}) {
  const int n = static_cast<int>(hosts.size());
  std::vector<Case> cases;
  unsigned seed = 1;
  for (auto dtype : kFloatTypes)
    for (auto count : counts) {
#ifdef RINGRUN_TEST_TSAN
      if (count > 100000 && dtype != RINGRUN_FLOAT32) continue;  // the same exchanges, fewer instrumented loops
#endif
      cases.push_back(make_case(n, count, dtype, seed++));
    }
  run_cases(hosts, cases, options);
}

}  // namespace

TEST_CASE("adasum: every float dtype against the serial reference, 1 to 8 ranks, TCP and shm") {
  const std::vector<std::size_t> counts = {0, 1, 2, 3, 7, 1000, 65537};
  for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
    for (int n = 1; n <= 8; ++n) {
      CAPTURE(n);
      INFO(test::placement_name(placement));
      check_against_reference(test::hosts_for(n, placement), counts);
    }
  }
}

TEST_CASE("adasum: a large tensor, the hierarchical transport, and several TCP streams") {
  const std::vector<std::size_t> large = {(1u << 20) + 3};
  for (int n : {3, 4}) {
    CAPTURE(n);
    check_against_reference(test::hosts_for(n, Placement::separate_hosts), large);
    check_against_reference(test::hosts_for(n, Placement::one_host), large);
  }
  for (auto blocks : {std::vector<int>{2, 2}, std::vector<int>{3, 3}}) {
    CAPTURE(blocks.size());
    check_against_reference(test::hosts_of_blocks(blocks), {0, 1, 5, 1000, 300007});
  }
  // 300007 float32: halves of 600 KB, striped in pieces of at least 64 KiB over 3 connections.
  check_against_reference(test::hosts_for(4, Placement::separate_hosts), {5, 300007}, {.tcp_streams = 3});
}

TEST_CASE("adasum: orthogonal tensors sum, parallel ones average, equal ones stay, zeros stay, any rank count") {
  for (int n : {2, 3, 4, 5, 6, 8}) {
    CAPTURE(n);
    constexpr std::size_t kCount = 64;
    std::vector<Tensor> orthogonal(static_cast<std::size_t>(n), Tensor(kCount, 0.0)), parallel = orthogonal;
    Tensor orthogonal_sum(kCount, 0.0), parallel_mean(kCount, 0.0);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < kCount; ++i) {
        auto& o = orthogonal[static_cast<std::size_t>(r)][i];
        o = i % static_cast<std::size_t>(n) == static_cast<std::size_t>(r) ? 1.0 + static_cast<double>(i) : 0.0;
        orthogonal_sum[i] += o;
        parallel[static_cast<std::size_t>(r)][i] = (r + 1) * (static_cast<double>(i % 7) - 3.0);
        parallel_mean[i] += parallel[static_cast<std::size_t>(r)][i] / n;
      }
    const std::vector<Tensor> equal(static_cast<std::size_t>(n), parallel[0]);
    const std::vector<Tensor> zeros(static_cast<std::size_t>(n), Tensor(kCount, 0.0));
    std::vector<Case> cases;
    for (const auto& [inputs, expected] : {std::pair{orthogonal, orthogonal_sum}, std::pair{parallel, parallel_mean},
                                           std::pair{equal, parallel[0]}, std::pair{zeros, zeros[0]}}) {
      Case c{RINGRUN_FLOAT64, {}, expected, std::vector<std::vector<char>>(static_cast<std::size_t>(n))};
      for (const auto& t : inputs) c.inputs.push_back(test::to_bytes(t, RINGRUN_FLOAT64));
      cases.push_back(std::move(c));
    }
    run_cases(test::hosts_for(n, Placement::separate_hosts), cases);
  }
}

TEST_CASE("adasum: the vector kernels give the scalar kernels' bits, subnormals and infinities too") {
  if (!core::simd::available()) MESSAGE("this CPU lacks AVX2/F16C: the scalar kernels are the only ones");
  std::mt19937 rng(7);
  const auto random_bits = [&](ringrun_dtype dtype, std::size_t count) {
    std::vector<char> bytes(count * core::dtype_size(dtype));
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t i = 0; i < count; ++i) {
      double v = normal(rng) * std::pow(2.0, static_cast<int>(rng() % 40) - 30);  // down to subnormal float16
      if (i % 97 == 5) v = i % 2 ? INFINITY : -INFINITY;
      if (i % 89 == 3) v = 0.0;
      test::store_value(bytes.data(), i, dtype, v);
    }
    return bytes;
  };
  for (auto dtype : kFloatTypes)
    for (std::size_t count : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 37u, 1000u, 4099u}) {
      INFO(core::dtype_name(dtype), ", count ", count);
      const auto a = random_bits(dtype, count), b = random_bits(dtype, count);
      const core::AdasumSums vector = core::adasum_sums(a.data(), b.data(), count, dtype);
      const core::AdasumSums scalar = core::adasum_sums_scalar(a.data(), b.data(), count, dtype);
      CHECK(std::memcmp(&vector, &scalar, sizeof vector) == 0);
      for (core::AdasumWeights w : {core::AdasumWeights{0.75, 1.25}, core::AdasumWeights{-0.3, 2.0}}) {
        auto by_vector = a, by_scalar = a;
        core::adasum_combine(by_vector.data(), b.data(), count, dtype, w);
        core::adasum_combine_scalar(by_scalar.data(), b.data(), count, dtype, w);
        CHECK(by_vector == by_scalar);
      }
    }
}

TEST_CASE("adasum: integer dtypes and fused spans are refused on every rank, which stay usable") {
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    std::vector<std::string> messages(static_cast<std::size_t>(n));
    std::mutex mutex;
    test::run_ranks(n, Placement::one_host, [&](int rank, Communicator& comm) {
      std::int32_t ints[3] = {1, 2, 3};
      try {
        comm.allreduce(ints, ints, 3, RINGRUN_INT32, RINGRUN_ADASUM);
      } catch (const RuntimeError& e) {
        std::lock_guard lock(mutex);
        CHECK(e.code() == RINGRUN_ERR_INVALID_ARGUMENT);
        messages[static_cast<std::size_t>(rank)] = e.what();
      }
      float x[2] = {1, 2};
      core::BufferSpan spans[2] = {{&x[0], &x[0], 4}, {&x[1], &x[1], 4}};
      CHECK_THROWS_AS(comm.allreduce_scattered(spans, RINGRUN_FLOAT32, RINGRUN_ADASUM), RuntimeError);
      comm.allreduce(x, x, 2, RINGRUN_FLOAT32, RINGRUN_ADASUM);  // equal tensors: themselves
      CHECK(x[0] == 1.0f);
      CHECK(x[1] == 2.0f);
      comm.finalize();
    });
    for (const auto& m : messages) {
      CHECK(m.find("int32") != std::string::npos);
      CHECK(m.find("SUM or AVERAGE") != std::string::npos);
    }
  }
  float a = 1, b = 2;
  CHECK_THROWS_AS(core::reduce(&a, &a, &b, 1, RINGRUN_FLOAT32, RINGRUN_ADASUM), RuntimeError);
}

TEST_CASE("adasum: a rank that calls another allreduce, or another count, makes every rank fail") {
  // Small (data rides with the other ranks' header check) and large (check, then the ring or
  // shared-memory stream); flat TCP with direct exchange and doubling, one host, two hosts of two.
  const std::vector<std::vector<std::string>> placements = {
      test::hosts_for(2, Placement::separate_hosts), test::hosts_for(5, Placement::separate_hosts),
      test::hosts_for(3, Placement::one_host), test::hosts_of_blocks({2, 2})};
  for (const auto& hosts : placements) {
    for (std::size_t count : {10u, 100000u}) {
      for (bool other_op : {true, false}) {
        const int n = static_cast<int>(hosts.size());
        CAPTURE(n);
        CAPTURE(hosts[0] == hosts[1]);
        CAPTURE(count);
        CAPTURE(other_op);
        std::vector<std::string> messages(static_cast<std::size_t>(n));
        test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
          std::vector<float> data(count, 1.0f);
          comm.allreduce(data.data(), data.data(), count, RINGRUN_FLOAT32, RINGRUN_ADASUM);
          const ringrun_op op = rank == 1 && other_op ? RINGRUN_SUM : RINGRUN_ADASUM;
          const std::size_t mine = rank == 1 && !other_op ? count - 1 : count;
          try {
            comm.allreduce(data.data(), data.data(), mine, RINGRUN_FLOAT32, op);
            messages[static_cast<std::size_t>(rank)] = "no error";
          } catch (const RuntimeError& e) {
            CHECK(e.code() == RINGRUN_ERR_MISMATCH);
            messages[static_cast<std::size_t>(rank)] = e.what();
          }
        });
        for (int r = 0; r < n; ++r) {
          INFO("rank ", r, ": ", messages[static_cast<std::size_t>(r)]);
          CHECK(messages[static_cast<std::size_t>(r)].find("disagree") != std::string::npos);
          const std::string differs = other_op ? "sum" : std::to_string(count - 1);
          CHECK(messages[static_cast<std::size_t>(r)].find(differs) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("adasum: a rank that drops out mid-job makes every other rank fail within 5 s, naming it") {
  for (int n : {4, 5}) {
    for (auto placement : {Placement::separate_hosts, Placement::one_host}) {
      CAPTURE(n);
      INFO(test::placement_name(placement));
      const auto outcome = test::run_until_one_drops(test::hosts_for(n, placement), 2, [](Communicator& comm, int) {
        std::vector<float> data((1 << 20) + 3, 1.0f);
        comm.allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_ADASUM);
      });
      for (int r = 0; r < n; ++r) {
        if (r == 2) continue;
        INFO("rank ", r, ": ", outcome.messages[static_cast<std::size_t>(r)]);
        CHECK(outcome.messages[static_cast<std::size_t>(r)].find("rank 2 (host node") != std::string::npos);
        CHECK(outcome.seconds[static_cast<std::size_t>(r)] < 5.0);
      }
    }
  }
}

TEST_CASE("adasum: through the engine, alone among fused sums, from the cache, and refused at submission") {
  constexpr int kRanks = 3;
  constexpr int kSteps = 4;  // later steps hit the response cache, where small sums ride in the records
  const std::vector<std::size_t> counts = {1, 3, 100, 5000};
  std::vector<Case> cases;
  for (std::size_t k = 0; k < counts.size(); ++k)
    cases.push_back(make_case(kRanks, counts[k], RINGRUN_FLOAT32, 50 + static_cast<unsigned>(k)));
  std::vector<std::string> refusals(kRanks);
  test::run_ranks(kRanks, Placement::one_host, [&](int rank, Communicator& comm) {
    engine::EngineConfig config;
    config.idle_heartbeat = std::chrono::milliseconds(20);
    engine::Engine engine(comm, config);
    const auto r = static_cast<std::size_t>(rank);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<char>> adasum_in(cases.size());
      std::vector<std::vector<float>> sums(cases.size());
      std::vector<engine::OpRef> states;
      for (std::size_t k = 0; k < cases.size(); ++k) {
        adasum_in[k] = cases[k].inputs[r];
        sums[k].assign(counts[k], static_cast<float>(rank + 1));
        for (bool adasum : {true, false}) {
          engine::OpRequest request;
          request.name = (adasum ? "adasum." : "sum.") + std::to_string(k);
          request.count = counts[k];
          request.op = adasum ? RINGRUN_ADASUM : RINGRUN_SUM;
          request.send = request.recv = adasum ? static_cast<void*>(adasum_in[k].data()) : sums[k].data();
          states.push_back(engine.submit(request));
        }
      }
      for (auto& state : states) CHECK(state->wait() == RINGRUN_OK);
      for (std::size_t k = 0; k < cases.size(); ++k) {
        CHECK(sums[k][0] == 6.0f);  // 1 + 2 + 3
        if (step == kSteps - 1) cases[k].results[r] = adasum_in[k];
      }
    }
    std::int64_t ints[2] = {1, 2};
    engine::OpRequest bad;
    bad.name = "ints";
    bad.count = 2;
    bad.dtype = RINGRUN_INT64;
    bad.op = RINGRUN_ADASUM;
    bad.send = bad.recv = ints;
    try {
      engine.submit(bad);
    } catch (const RuntimeError& e) {
      refusals[r] = e.what();
    }
    engine.shutdown();
  });
  for (const Case& c : cases) {
    INFO("count ", c.expected.size());
    const double error = test::relative_error(test::from_bytes(c.results[0], c.dtype), c.expected);
    CHECK(error <= test::adasum_tolerance(c.dtype, kRanks));
    for (int r = 1; r < kRanks; ++r) CHECK(c.results[static_cast<std::size_t>(r)] == c.results[0]);
  }
  for (const auto& m : refusals)
    CHECK(m.find("tensor 'ints': Adasum combines floating-point tensors") != std::string::npos);
}
