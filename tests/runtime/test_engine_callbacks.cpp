// The engine's completion callbacks (OpRequest::on_done, the C API's ringrun_request::on_done)
// and timed waits (OpState::wait_until, ringrun_wait_for), with ranks as threads.
#include <doctest/doctest.h>

#include "engine_test_support.hpp"

using namespace engine_test;

namespace {

struct Seen {
  std::atomic<int> calls{0};
  std::atomic<int> status{-100};
  std::string message;
};

void record(void* arg, int status, const char* message) {
  auto* seen = static_cast<Seen*>(arg);
  seen->message = message;
  seen->status.store(status);
  seen->calls.fetch_add(1);
}

// A callback that submits the next op of a chain (a binding's second step: sizes, then data).
struct Chain {
  engine::Engine* engine = nullptr;
  std::vector<float>* data = nullptr;
  Seen second;
  std::atomic<int> first_status{-100};
};

void submit_next(void* arg, int status, const char*) {
  auto* chain = static_cast<Chain*>(arg);
  chain->first_status.store(status);
  OpRequest r;
  r.name = "chain.second";
  r.send = r.recv = chain->data->data();
  r.count = chain->data->size();
  r.on_done = record;
  r.on_done_arg = &chain->second;
  (void)chain->engine->submit(std::move(r)).release();
}

}  // namespace

TEST_CASE("engine: a callback is called once per op, with the status, and may submit the next op") {
  test::run_ranks(3, Placement::one_host, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> x(8, static_cast<float>(rank + 1)), y(8, 1.0f);
    Seen seen;
    Chain chain;
    chain.engine = &engine;
    chain.data = &y;
    OpRequest r;
    r.name = "cb.sum";
    r.send = r.recv = x.data();
    r.count = x.size();
    r.on_done = record;
    r.on_done_arg = &seen;
    (void)engine.submit(std::move(r)).release();
    OpRequest first;
    first.name = "chain.first";
    first.kind = Collective::barrier;
    first.on_done = submit_next;
    first.on_done_arg = &chain;
    (void)engine.submit(std::move(first)).release();
    for (int i = 0; i < 5000 && (seen.calls.load() == 0 || chain.second.calls.load() == 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(seen.calls.load() == 1);
    CHECK(seen.status.load() == RINGRUN_OK);
    CHECK(x[0] == 6.0f);
    CHECK(chain.first_status.load() == RINGRUN_OK);
    CHECK(chain.second.calls.load() == 1);
    CHECK(y[7] == 3.0f);
    // An op only this rank submits fails at shutdown: its callback reports why.
    Seen orphan;
    OpRequest lonely;
    lonely.name = "only.rank." + std::to_string(rank);
    lonely.send = lonely.recv = x.data();
    lonely.count = 1;
    lonely.on_done = record;
    lonely.on_done_arg = &orphan;
    (void)engine.submit(std::move(lonely)).release();
    engine.shutdown();
    CHECK(orphan.calls.load() == 1);
    CHECK(orphan.status.load() == RINGRUN_ERR_NOT_INITIALIZED);
    CHECK(orphan.message.find("only.rank.") != std::string::npos);
    comm.finalize();
  });
}

TEST_CASE("engine: a timed wait returns when time runs out and the op still completes later") {
  test::run_ranks(2, Placement::one_host, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> x(4, 1.0f);
    OpRequest r;
    r.name = "late.on.rank1";
    r.send = r.recv = x.data();
    r.count = x.size();
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto op = engine.submit(r);
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      CHECK_FALSE(op->wait_until(start + std::chrono::milliseconds(100)));
      const auto waited = std::chrono::steady_clock::now() - start;
      CHECK(waited >= std::chrono::milliseconds(100));
      CHECK(waited < std::chrono::milliseconds(350));
    }
    CHECK(op->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
    CHECK(op->code() == RINGRUN_OK);
    CHECK(x[0] == 2.0f);
    engine.shutdown();
    comm.finalize();
  });
}
