// The engine's collectives with a part per rank and its join, with ranks as threads: an allgather
// whose count differs per rank (the output asked for once the counts are negotiated), alltoall,
// reducescatter, a mismatch of shapes of one count, and join's stand-ins.
#include <doctest/doctest.h>

#include "engine_test_support.hpp"

using namespace engine_test;

namespace {

// An output buffer the engine sizes (what a binding's allocator does).
struct Output {
  std::vector<float> data;
  std::vector<std::size_t> from;
  core::Communicator::AlltoallOutput fn() {
    return [this](std::size_t total, std::span<const std::size_t> from_each) {
      data.assign(total, -1.0f);
      from.assign(from_each.begin(), from_each.end());
      return static_cast<void*>(data.data());
    };
  }
};

}  // namespace

TEST_CASE("engine: allgather of different counts, alltoall and reducescatter, in one step of named ops") {
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    test::run_ranks(n, Placement::one_host, [&](int rank, Communicator& comm) {
      Engine engine(comm, quick_config());
      // allgather: rank r sends r + 1 elements of value r.
      std::vector<float> mine(static_cast<std::size_t>(rank) + 1, static_cast<float>(rank));
      Output gathered, exchanged;
      OpRequest g;
      g.kind = Collective::allgather;
      g.name = "varying";
      g.send = mine.data();
      g.count = mine.size();
      g.varying = true;
      g.output = gathered.fn();
      // alltoall: rank r sends s + 1 elements of value 10 r + s to rank s.
      std::vector<float> out;
      OpRequest a;
      a.kind = Collective::alltoall;
      a.name = "exchange";
      for (int s = 0; s < n; ++s) {
        a.to_each.push_back(static_cast<std::size_t>(s) + 1);
        out.insert(out.end(), static_cast<std::size_t>(s) + 1, static_cast<float>(10 * rank + s));
      }
      a.send = out.data();
      a.count = out.size();
      a.output = exchanged.fn();
      // reducescatter of 2n + 1 rows of 2: rank r keeps its rows of the sum.
      const std::size_t rows = 2 * static_cast<std::size_t>(n) + 1;
      std::vector<float> full(rows * 2, static_cast<float>(rank + 1));
      const std::size_t my_rows = rows / n + (static_cast<std::size_t>(rank) < rows % n ? 1 : 0);
      std::vector<float> share(my_rows * 2, 0.0f);
      OpRequest s;
      s.kind = Collective::reducescatter;
      s.name = "scatter";
      s.send = full.data();
      s.recv = share.data();
      s.count = full.size();
      const std::int64_t dims[] = {static_cast<std::int64_t>(rows), 2};
      s.dims = engine::Dims::of(dims, 2);
      auto o1 = engine.submit(std::move(g)), o2 = engine.submit(std::move(a)), o3 = engine.submit(std::move(s));
      CHECK(o1->wait() == RINGRUN_OK);
      CHECK(o2->wait() == RINGRUN_OK);
      CHECK(o3->wait() == RINGRUN_OK);
      std::vector<float> want_gather, want_exchange;
      for (int r = 0; r < n; ++r) {
        want_gather.insert(want_gather.end(), static_cast<std::size_t>(r) + 1, static_cast<float>(r));
        want_exchange.insert(want_exchange.end(), static_cast<std::size_t>(rank) + 1, static_cast<float>(10 * r + rank));
      }
      CHECK(gathered.data == want_gather);
      CHECK(exchanged.data == want_exchange);
      CHECK(exchanged.from == std::vector<std::size_t>(static_cast<std::size_t>(n), static_cast<std::size_t>(rank) + 1));
      CHECK(share == std::vector<float>(my_rows * 2, static_cast<float>(n * (n + 1) / 2)));
      engine.shutdown();
      comm.finalize();
    });
  }
}

TEST_CASE("engine: the same count in another shape fails on every rank, naming both shapes") {
  std::vector<std::string> messages(2);
  test::run_ranks(2, Placement::one_host, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> x(6, 1.0f);
    OpRequest r;
    r.name = "shaped";
    r.send = r.recv = x.data();
    r.count = 6;
    const std::int64_t a[] = {2, 3}, b[] = {3, 2};
    r.dims = engine::Dims::of(rank ? a : b, 2);
    auto op = engine.submit(std::move(r));
    CHECK(op->wait() == RINGRUN_ERR_MISMATCH);
    messages[static_cast<std::size_t>(rank)] = op->message();
    engine.shutdown();
    comm.finalize();
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(m.find("[2, 3]") != std::string::npos);
    CHECK(m.find("[3, 2]") != std::string::npos);
  }
}

TEST_CASE("engine: joined ranks stand in for allreduces with neutral input; other collectives fail; join returns the last") {
  constexpr int kRanks = 3;
  std::vector<int> lasts(kRanks, -1);
  std::vector<std::string> gather_errors(kRanks);
  test::run_ranks(kRanks, Placement::one_host, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    int last = -1;
    OpRequest j;
    j.kind = Collective::barrier;
    j.name = "ringrun.join";
    j.join = true;
    j.recv = &last;
    if (rank == 1) {  // rank 1 joins first; 0 and 2 run allreduces of every op, then join
      auto joined = engine.submit(std::move(j));
      CHECK(joined->wait() == RINGRUN_OK);
    } else {
      for (auto op : {RINGRUN_SUM, RINGRUN_AVERAGE, RINGRUN_MIN, RINGRUN_MAX, RINGRUN_PRODUCT}) {
        std::vector<double> x(5, rank + 2.0);  // ranks 0 and 2: 2 and 4
        OpRequest r;
        r.name = std::string("joined.") + core::op_name(op);
        r.send = r.recv = x.data();
        r.count = x.size();
        r.dtype = RINGRUN_FLOAT64;
        r.op = op;
        CHECK(engine.submit(std::move(r))->wait() == RINGRUN_OK);
        const double want = op == RINGRUN_SUM ? 6.0 : op == RINGRUN_AVERAGE ? 2.0 : op == RINGRUN_MIN ? 2.0
                            : op == RINGRUN_MAX ? 4.0 : 8.0;
        CHECK_MESSAGE(x[0] == want, core::op_name(op));
      }
      std::vector<float> g(2, 1.0f), out(2 * kRanks);
      OpRequest r;
      r.kind = Collective::allgather;
      r.name = "joined.gather";
      r.send = g.data();
      r.recv = out.data();
      r.count = 2;
      auto gather = engine.submit(std::move(r));
      CHECK(gather->wait() == RINGRUN_ERR_MISMATCH);
      gather_errors[static_cast<std::size_t>(rank)] = gather->message();
      if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // joins last
      CHECK(engine.submit(std::move(j))->wait() == RINGRUN_OK);
    }
    lasts[static_cast<std::size_t>(rank)] = last;
    engine.shutdown();
    comm.finalize();
  });
  for (int r = 0; r < kRanks; ++r) CHECK(lasts[static_cast<std::size_t>(r)] == 2);
  for (int r : {0, 2}) {
    CAPTURE(gather_errors[static_cast<std::size_t>(r)]);
    CHECK(gather_errors[static_cast<std::size_t>(r)].find("join()") != std::string::npos);
  }
}
