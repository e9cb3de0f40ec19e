// The collectives whose result differs per rank (core::Communicator::alltoall and reduce_scatter),
// with ranks as threads: one host (shared memory), separate hosts (TCP) and several hosts of
// several ranks (the hierarchical communicator, whose reduce-scatter takes the TCP ring), against a
// serial reference; uneven blocks and counts, empty ones, every dtype, and the mismatches.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "rank_threads.hpp"
#include "reference.hpp"
#include "ringrun/runtime.hpp"

using ringrun::RuntimeError;
using ringrun::core::Communicator;
using ringrun::test::Placement;

namespace {

const ringrun_dtype kAllDtypes[] = {RINGRUN_FLOAT32, RINGRUN_FLOAT64, RINGRUN_FLOAT16, RINGRUN_BFLOAT16, RINGRUN_INT32,
                                    RINGRUN_INT64,   RINGRUN_UINT8,   RINGRUN_INT8,    RINGRUN_INT16,    RINGRUN_BOOL};

// Blocks of the first dimension, the first ranks one row more (Horovod's split), times row elements.
std::vector<std::size_t> row_bounds(std::size_t rows, std::size_t row, int n) {
  std::vector<std::size_t> bounds(static_cast<std::size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    const std::size_t mine = rows / static_cast<std::size_t>(n) + (static_cast<std::size_t>(r) < rows % n ? 1 : 0);
    bounds[static_cast<std::size_t>(r) + 1] = bounds[static_cast<std::size_t>(r)] + mine * row;
  }
  return bounds;
}

void check_reduce_scatter(const std::vector<std::string>& hosts, std::size_t rows, std::size_t row) {
  const int n = static_cast<int>(hosts.size());
  const auto bounds = row_bounds(rows, row, n);
  const std::size_t count = rows * row;
  std::vector<std::string> wrong(static_cast<std::size_t>(n));
  // One set of communicators for every dtype and op: each setup costs more than the calls.
  ringrun::test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
    for (auto dtype : kAllDtypes)
      for (auto op : ringrun::test::kOps) {
        const auto expected = ringrun::test::reference(n, count, dtype, op);
        const std::size_t esize = ringrun::core::dtype_size(dtype);
        const auto input = ringrun::test::make_input(rank, count, dtype, op);
        const std::size_t begin = bounds[static_cast<std::size_t>(rank)], end = bounds[static_cast<std::size_t>(rank) + 1];
        std::vector<char> out((end - begin) * esize + 1);
        comm.reduce_scatter(input.data(), out.data(), count, bounds, dtype, op);
        if ((end - begin) && std::memcmp(out.data(), expected.data() + begin * esize, (end - begin) * esize) != 0 &&
            wrong[static_cast<std::size_t>(rank)].empty())
          wrong[static_cast<std::size_t>(rank)] =
              std::string(ringrun::core::dtype_name(dtype)) + " " + ringrun::core::op_name(op);
      }
    comm.finalize();
  });
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(wrong[static_cast<std::size_t>(r)].empty(), "rank ", r, "'s block differs: ",
                                            wrong[static_cast<std::size_t>(r)]);
}

// Rank r sends to rank s the elements value(r, s, k) = r * 1000 + s * 10 + k % 10, as many as
// counts[r][s] says.
void check_alltoall(const std::vector<std::string>& hosts, const std::vector<std::vector<std::size_t>>& counts,
                    std::span<const ringrun_dtype> dtypes) {
  const int n = static_cast<int>(hosts.size());
  std::vector<std::string> wrong(static_cast<std::size_t>(n));
  ringrun::test::run_ranks_on(hosts, [&](int rank, Communicator& comm) {
    for (auto dtype : dtypes) {
      const std::size_t esize = ringrun::core::dtype_size(dtype);
      const auto& mine = counts[static_cast<std::size_t>(rank)];
      std::vector<char> send(std::accumulate(mine.begin(), mine.end(), std::size_t{0}) * esize + 1);
      std::size_t at = 0;
      for (int s = 0; s < n; ++s)
        for (std::size_t k = 0; k < mine[static_cast<std::size_t>(s)]; ++k)
          ringrun::test::store_value(send.data(), at++, dtype, static_cast<double>((rank * 7 + s * 3 + k) % 50));
      std::vector<char> recv;
      std::vector<std::size_t> from;
      comm.alltoall(send.data(), mine, dtype, [&](std::size_t total, std::span<const std::size_t> from_each) {
        recv.resize(total * esize + 1);
        from.assign(from_each.begin(), from_each.end());
        return recv.data();
      });
      std::vector<char> want(recv.size());
      at = 0;
      bool ok = true;
      for (int r = 0; r < n; ++r) {
        const std::size_t c = counts[static_cast<std::size_t>(r)][static_cast<std::size_t>(rank)];
        ok = ok && from[static_cast<std::size_t>(r)] == c;
        for (std::size_t k = 0; k < c; ++k)
          ringrun::test::store_value(want.data(), at++, dtype, static_cast<double>((r * 7 + rank * 3 + k) % 50));
      }
      ok = ok && (at == 0 || std::memcmp(recv.data(), want.data(), at * esize) == 0);
      if (!ok && wrong[static_cast<std::size_t>(rank)].empty()) wrong[static_cast<std::size_t>(rank)] = ringrun::core::dtype_name(dtype);
    }
    comm.finalize();
  });
  for (int r = 0; r < n; ++r)
    CHECK_MESSAGE(wrong[static_cast<std::size_t>(r)].empty(), "rank ", r, " received the wrong elements: ", wrong[static_cast<std::size_t>(r)]);
}

std::vector<std::vector<std::size_t>> random_counts(int n, std::mt19937& rng, std::size_t most) {
  std::uniform_int_distribution<std::size_t> pick(0, most);
  std::vector<std::vector<std::size_t>> counts(static_cast<std::size_t>(n), std::vector<std::size_t>(static_cast<std::size_t>(n)));
  for (auto& row : counts)
    for (auto& c : row) c = pick(rng);
  return counts;
}

}  // namespace

TEST_CASE("reduce_scatter: every dtype and op, uneven row blocks, one host, separate hosts, several of several") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    for (auto placement : {Placement::one_host, Placement::separate_hosts}) {
      INFO(ringrun::test::placement_name(placement));
      const auto hosts = ringrun::test::hosts_for(n, placement);
      check_reduce_scatter(hosts, 2 * static_cast<std::size_t>(n) + 1, 3);  // the first ranks one row more
      check_reduce_scatter(hosts, 1, 5);                                    // fewer rows than ranks
    }
  }
  check_reduce_scatter(ringrun::test::hosts_of_blocks({2, 2}), 9, 4);
  check_reduce_scatter(ringrun::test::hosts_of_blocks({2, 2}), 0, 4);  // nothing at all
}

TEST_CASE("reduce_scatter: large blocks through the shared-memory ring and the TCP ring") {
  for (auto placement : {Placement::one_host, Placement::separate_hosts}) {
    INFO(ringrun::test::placement_name(placement));
    const int n = 3;
    const std::size_t rows = 1000003, count = rows;  // one element a row: blocks of 333335/333334
    const auto bounds = row_bounds(rows, 1, n);
    const auto expected = ringrun::test::reference(n, count, RINGRUN_FLOAT32, RINGRUN_SUM);
    std::vector<int> wrong(n, 0);
    ringrun::test::run_ranks_on(ringrun::test::hosts_for(n, placement), [&](int rank, Communicator& comm) {
      const auto input = ringrun::test::make_input(rank, count, RINGRUN_FLOAT32, RINGRUN_SUM);
      const std::size_t begin = bounds[static_cast<std::size_t>(rank)], end = bounds[static_cast<std::size_t>(rank) + 1];
      std::vector<float> out(end - begin);
      comm.reduce_scatter(input.data(), out.data(), count, bounds, RINGRUN_FLOAT32, RINGRUN_SUM);
      if (std::memcmp(out.data(), expected.data() + begin * 4, out.size() * 4) != 0) wrong[static_cast<std::size_t>(rank)] = 1;
      comm.finalize();
    });
    for (int r = 0; r < n; ++r) CHECK(wrong[static_cast<std::size_t>(r)] == 0);
  }
}

TEST_CASE("alltoall: random counts per pair (zeros too), every dtype, 1 to 4 ranks and several hosts of several") {
  std::mt19937 rng(42);
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    for (auto placement : {Placement::one_host, Placement::separate_hosts})
      check_alltoall(ringrun::test::hosts_for(n, placement), random_counts(n, rng, 9), kAllDtypes);
  }
  const ringrun_dtype float32[] = {RINGRUN_FLOAT32};
  check_alltoall(ringrun::test::hosts_of_blocks({2, 2}), random_counts(4, rng, 300000), float32);
}

TEST_CASE("alltoall and reduce_scatter: mismatched dtypes fail on every rank, bad blocks on the caller") {
  std::vector<std::string> messages(2);
  ringrun::test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    const std::vector<std::size_t> bad = {0, 3, 4};  // two blocks that end past 3 elements
    CHECK_THROWS_WITH_AS(comm.reduce_scatter(data.data(), data.data(), 3, bad, RINGRUN_FLOAT32, RINGRUN_SUM),
                         doctest::Contains("do not split 3 elements"), RuntimeError);
    const std::vector<std::size_t> to_each = {1, 1};
    try {
      comm.alltoall(data.data(), to_each, rank == 0 ? RINGRUN_FLOAT32 : RINGRUN_INT32,
                    [&](std::size_t, std::span<const std::size_t>) { return static_cast<void*>(data.data()); });
    } catch (const RuntimeError& e) {
      messages[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(m.find("alltoall") != std::string::npos);
    CHECK(m.find("ranks disagree") != std::string::npos);
  }
}
