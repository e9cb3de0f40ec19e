// The engine (named async ops, negotiation, fusion, response cache, timeline, stall inspector,
// shutdown) with ranks as threads, each with its own Communicator and Engine.
#include <doctest/doctest.h>

#include "engine_test_support.hpp"

using namespace engine_test;


TEST_CASE("engine: shuffled named ops from several threads per rank equal the serial reference") {
  for (Placement placement : {Placement::one_host, Placement::separate_hosts}) {
    constexpr int kRanks = 2;
    constexpr int kThreadsPerRank = 4;
    constexpr std::size_t kOpsPerRank = 2500;  // 2 placements x 2 ranks x 2500 = 10k submissions
    auto specs = make_specs(kOpsPerRank, kRanks);
    CAPTURE(test::placement_name(placement));
    std::atomic<int> wrong{0}, failed{0};
    std::atomic<std::uint64_t> fused{0};
    test::run_ranks(kRanks, placement, [&](int rank, Communicator& comm) {
      EngineConfig config = quick_config();
      config.fusion_threshold_bytes = 16 << 10;  // small, so that chunks split as well as fuse
      Engine engine(comm, config);
      std::vector<Buffers> buffers(specs.size());
      for (std::size_t k = 0; k < specs.size(); ++k) buffers[k] = make_buffers(specs[k], k, rank, kRanks);
      // Steps of 100 ops (a training step's gradients): each rank's threads submit the step's ops in
      // this rank's shuffled order, then wait for them before the next step.
      std::vector<engine::OpRef> states(specs.size());
      constexpr std::size_t kStep = 100;
      for (std::size_t begin = 0; begin < specs.size(); begin += kStep) {
        std::vector<std::size_t> ids;  // the same ids on every rank, each rank in its own order
        for (std::size_t k = begin; k < std::min(specs.size(), begin + kStep); ++k) ids.push_back(k);
        std::mt19937 step_rng(static_cast<unsigned>(begin * 31 + static_cast<std::size_t>(rank)));
        std::shuffle(ids.begin(), ids.end(), step_rng);
        std::vector<std::thread> submitters;
        for (int t = 0; t < kThreadsPerRank; ++t)
          submitters.emplace_back([&, t] {
            for (std::size_t j = static_cast<std::size_t>(t); j < ids.size(); j += kThreadsPerRank) {
              std::size_t k = ids[j];
              states[k] = engine.submit(request_for(specs[k], buffers[k]));
              if (j % 37 == static_cast<std::size_t>(rank)) std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
          });
        for (auto& th : submitters) th.join();
        for (std::size_t k : ids) states[k]->wait();
      }
      for (std::size_t k = 0; k < specs.size(); ++k) {
        if (states[k]->wait() != RINGRUN_OK) {
          if (failed++ == 0) FAIL_CHECK(specs[k].name, ": ", states[k]->message());
          continue;
        }
        const auto& got = result_of(specs[k], buffers[k]);
        if (got != buffers[k].expected && wrong++ == 0) FAIL_CHECK("rank ", rank, ": ", specs[k].name, " differs from the serial reference");
      }
      engine.shutdown();
      auto st = engine.stats();
      fused += st.fused_tensors;
      CHECK(st.completed == kOpsPerRank);
      if (rank == 0)
        MESSAGE(std::string(test::placement_name(placement)), ": ", st.completed, " ops in ", st.cycles, " cycles, ", st.fused_tensors,
                " tensors in ", st.fused_allreduces, " fused allreduces");
    });
    CHECK(wrong == 0);
    CHECK(failed == 0);
    CHECK(fused > 0);  // some allreduces went through the fusion buffer
  }
}

TEST_CASE("engine: steady state negotiates through the response cache, and fp16 compression is exact on small integers") {
  constexpr int kRanks = 3;
  auto specs = make_specs(64, kRanks);
  for (auto& s : specs) {
    s.kind = Collective::allreduce;
    s.dtype = RINGRUN_FLOAT32;
    s.op = RINGRUN_SUM;
  }
  std::atomic<int> wrong{0};
  std::vector<engine::EngineStats> stats(kRanks);
  test::run_ranks(kRanks, Placement::one_host, [&](int rank, Communicator& comm) {
    EngineConfig config = quick_config();
    config.fp16_compression = true;
    Engine engine(comm, config);
    for (int step = 0; step < 5; ++step) {
      std::vector<Buffers> buffers;
      std::vector<engine::OpRef> states;
      for (std::size_t k = 0; k < specs.size(); ++k) buffers.push_back(make_buffers(specs[k], k, rank, kRanks));
      for (std::size_t j = 0; j < specs.size(); ++j) {
        std::size_t k = (j * 17 + static_cast<std::size_t>(rank) * 5 + static_cast<std::size_t>(step)) % specs.size();
        states.resize(specs.size());
        states[k] = engine.submit(request_for(specs[k], buffers[k]));
      }
      for (std::size_t k = 0; k < specs.size(); ++k) {
        REQUIRE(states[k]->wait() == RINGRUN_OK);
        if (buffers[k].output != buffers[k].expected) ++wrong;
      }
    }
    engine.shutdown();
    stats[static_cast<std::size_t>(rank)] = engine.stats();
  });
  CHECK(wrong == 0);
  for (auto& s : stats) {
    CHECK(s.described_submissions == 64);      // first step only
    CHECK(s.cached_submissions == 4 * 64);     // every later step through the cache bits
  }
}

TEST_CASE("engine: small cached allreduces complete from the negotiation records; a full cache evicts its least recently used entry") {
  // 20 names through a cache of 8: every step evicts, and the bits keep meaning the same name on
  // every rank (a wrong bit would apply another tensor's description and fail or corrupt). Inline
  // data on and off must give the same bits; AVERAGE divides once.
  constexpr int kRanks = 3;
  auto specs = make_specs(20, kRanks);
  for (auto& s : specs) s.kind = Collective::allreduce;
  for (std::size_t inline_bytes : {std::size_t{4096}, std::size_t{0}}) {
    CAPTURE(inline_bytes);
    std::atomic<int> wrong{0};
    std::vector<engine::EngineStats> stats(kRanks);
    test::run_ranks(kRanks, Placement::one_host, [&](int rank, Communicator& comm) {
      EngineConfig config = quick_config();
      config.cache_capacity = 8;
      config.inline_bytes = inline_bytes;
      Engine engine(comm, config);
      for (int step = 0; step < 6; ++step) {
        // Half the names each step, rotating, so that some entries go unused for a while.
        std::vector<std::size_t> ids;
        for (std::size_t k = 0; k < specs.size(); ++k)
          if ((k + static_cast<std::size_t>(step)) % 2 == 0 || k < 4) ids.push_back(k);
        std::vector<Buffers> buffers(specs.size());
        std::vector<engine::OpRef> states(specs.size());
        for (std::size_t k : ids) buffers[k] = make_buffers(specs[k], k, rank, kRanks);
        std::mt19937 rng(static_cast<unsigned>(step * 7 + rank));
        std::shuffle(ids.begin(), ids.end(), rng);
        for (std::size_t k : ids) states[k] = engine.submit(request_for(specs[k], buffers[k]));
        for (std::size_t k : ids) {
          REQUIRE(states[k]->wait() == RINGRUN_OK);
          if (buffers[k].output != buffers[k].expected) ++wrong;
        }
      }
      // AVERAGE through the inline path: the sum of 3 small integers over 3, as the transports do.
      std::vector<float> x(5, static_cast<float>(rank + 1)), y(5, 0.0f);
      OpRequest average;
      average.name = "average";
      average.send = x.data();
      average.recv = y.data();
      average.count = x.size();
      average.op = RINGRUN_AVERAGE;
      for (int i = 0; i < 3; ++i) {
        REQUIRE(engine.submit(average)->wait() == RINGRUN_OK);
        for (float v : y)
          if (v != 6.0f / 3.0f) ++wrong;
      }
      engine.shutdown();
      stats[static_cast<std::size_t>(rank)] = engine.stats();
    });
    CHECK(wrong == 0);
    for (auto& st : stats) {
      CHECK(st.cache_evictions > 0);
      CHECK(st.cached_submissions > 0);
      if (inline_bytes) CHECK(st.inline_allreduces > 0);
      else CHECK(st.inline_allreduces == 0);
    }
    MESSAGE("inline ", inline_bytes, ": ", stats[0].inline_allreduces, " inline, ", stats[0].cache_evictions, " evictions, ",
            stats[0].cached_submissions, " cached, ", stats[0].described_submissions, " described");
  }
}

TEST_CASE("engine: tensors of at least unfused_min_bytes run on their own buffers, the small ones fuse") {
  std::vector<engine::EngineStats> stats(2);
  std::atomic<int> wrong{0};
  test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    EngineConfig config = quick_config();
    config.unfused_min_bytes = 256;  // 64 floats
    config.inline_bytes = 0;         // every op through a collective
    Engine engine(comm, config);
    std::vector<std::vector<float>> in, out;
    std::vector<engine::OpRef> states;
    for (int k = 0; k < 8; ++k) {
      const std::size_t count = k % 2 ? 100 : 10;  // 400 bytes alone, 40 bytes fused
      in.emplace_back(count, static_cast<float>(rank + k));
      out.emplace_back(count, -1.0f);
    }
    for (int k = 0; k < 8; ++k) {
      OpRequest r;
      r.name = "t" + std::to_string(k);
      r.send = in[static_cast<std::size_t>(k)].data();
      r.recv = out[static_cast<std::size_t>(k)].data();
      r.count = in[static_cast<std::size_t>(k)].size();
      states.push_back(engine.submit(r));
    }
    for (int k = 0; k < 8; ++k) {
      REQUIRE(states[static_cast<std::size_t>(k)]->wait() == RINGRUN_OK);
      for (float v : out[static_cast<std::size_t>(k)])
        if (v != static_cast<float>(2 * k + 1)) ++wrong;
    }
    engine.shutdown();
    stats[static_cast<std::size_t>(rank)] = engine.stats();
  });
  CHECK(wrong == 0);
  for (auto& st : stats) CHECK(st.fused_tensors <= 4);  // only the 10-float ones may share a buffer
}

TEST_CASE("engine: tensors adjacent in memory fuse as one span; ranks with other layouts still agree") {
  // Rank 0 keeps its tensors back to back in one send and one recv buffer (one span: a plain
  // allreduce), rank 1 each in its own buffer (one span per tensor, or the fusion buffer over
  // TCP), rank 2 back to back in place with a gap after every fifth (a few spans). Whatever each
  // rank makes of its layout, the collective is the same one.
  constexpr int kRanks = 3;
  constexpr std::size_t kTensors = 40, kCount = 100;
  for (Placement placement : {Placement::one_host, Placement::separate_hosts}) {
    CAPTURE(static_cast<int>(placement));
    std::atomic<int> wrong{0};
    test::run_ranks(kRanks, placement, [&](int rank, Communicator& comm) {
      Engine engine(comm, quick_config());
      std::vector<float> flat_send(kTensors * (kCount + 8)), flat_recv(flat_send.size());
      std::vector<std::vector<float>> own_send(kTensors, std::vector<float>(kCount)), own_recv = own_send;
      auto send_of = [&](std::size_t k) -> float* {
        if (rank == 0) return flat_send.data() + k * kCount;
        if (rank == 1) return own_send[k].data();
        return flat_send.data() + k * kCount + (k / 5) * 8;  // in place, a gap of 8 after every fifth
      };
      auto recv_of = [&](std::size_t k) -> float* {
        if (rank == 0) return flat_recv.data() + k * kCount;
        if (rank == 1) return own_recv[k].data();
        return send_of(k);
      };
      for (int step = 0; step < 4; ++step) {
        std::vector<std::size_t> order(kTensors);
        std::iota(order.begin(), order.end(), std::size_t{0});
        // In order at first: the names take cache bits in that order, and a cycle runs a step's
        // names in bit order (whatever order later steps submit them in), which is memory order.
        std::mt19937 rng(static_cast<unsigned>(step * 10 + rank));
        if (step > 0) std::shuffle(order.begin(), order.end(), rng);
        std::vector<engine::OpRef> states(kTensors);
        for (std::size_t k : order) {
          std::fill_n(send_of(k), kCount, static_cast<float>(rank + 1 + static_cast<int>(k) + step));
          OpRequest r;
          r.name = "flat." + std::to_string(k);
          r.send = send_of(k);
          r.recv = recv_of(k);
          r.count = kCount;
          states[k] = engine.submit(r);
        }
        for (std::size_t k = 0; k < kTensors; ++k) {
          if (states[k]->wait() != RINGRUN_OK) ++wrong;
          const float want = static_cast<float>(kRanks * (kRanks + 1) / 2 + kRanks * (static_cast<int>(k) + step));
          if (!std::all_of(recv_of(k), recv_of(k) + kCount, [&](float v) { return v == want; })) ++wrong;
        }
      }
      engine.shutdown();
      if (engine.stats().fused_allreduces == 0) ++wrong;
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("engine: a mismatch fails that op on every rank, naming the tensor and the ranks; others go on") {
  constexpr int kRanks = 3;
  std::vector<std::string> messages(kRanks);
  std::vector<int> codes(kRanks), ok_codes(kRanks);
  std::vector<float> sums(kRanks);
  test::run_ranks(kRanks, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> a(8, 1.0f), b(8, 0.0f), c(1, static_cast<float>(rank + 1)), d(1, 0.0f);
    OpRequest bad;
    bad.name = "grad.bad";
    bad.send = a.data();
    bad.recv = b.data();
    bad.count = rank == 1 ? 7 : 8;  // rank 1 disagrees on the count
    OpRequest good;
    good.name = "grad.good";
    good.send = c.data();
    good.recv = d.data();
    good.count = 1;
    auto s1 = engine.submit(bad);
    auto s2 = engine.submit(good);
    codes[static_cast<std::size_t>(rank)] = s1->wait();
    messages[static_cast<std::size_t>(rank)] = s1->message();
    ok_codes[static_cast<std::size_t>(rank)] = s2->wait();
    sums[static_cast<std::size_t>(rank)] = d[0];
    // The name is free again after the failure.
    bad.count = 8;
    CHECK(engine.submit(bad)->wait() == RINGRUN_OK);
    engine.shutdown();
  });
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(messages[static_cast<std::size_t>(r)]);
    CHECK(codes[static_cast<std::size_t>(r)] == RINGRUN_ERR_MISMATCH);
    CHECK(messages[static_cast<std::size_t>(r)] == messages[0]);
    CHECK(messages[static_cast<std::size_t>(r)].find("'grad.bad'") != std::string::npos);
    CHECK(messages[static_cast<std::size_t>(r)].find("ranks 0, 2: allreduce float32 sum of 8") != std::string::npos);
    CHECK(messages[static_cast<std::size_t>(r)].find("rank 1: allreduce float32 sum of 7") != std::string::npos);
    CHECK(ok_codes[static_cast<std::size_t>(r)] == RINGRUN_OK);
    CHECK(sums[static_cast<std::size_t>(r)] == 6.0f);
  }
}

TEST_CASE("engine: a stalled op fails after the shutdown time, naming the tensor and the missing rank") {
  std::string message;
  int code = 0;
  double waited = 0;
  std::atomic<bool> lonely_failed{false};
  test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    EngineConfig config = quick_config();
    config.stall_warning = std::chrono::milliseconds(500);
    config.stall_shutdown = std::chrono::milliseconds(1500);
    Engine engine(comm, config);
    std::vector<float> x(4, 1.0f), y(4, 0.0f);
    OpRequest r;
    r.send = x.data();
    r.recv = y.data();
    r.count = 4;
    if (rank == 0) {
      r.name = "lonely";  // rank 1 never submits it
      auto start = std::chrono::steady_clock::now();
      auto s = engine.submit(r);
      code = s->wait();
      waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      message = s->message();
      lonely_failed = true;
    }
    while (!lonely_failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r.name = "after";  // the engine goes on
    CHECK(engine.submit(r)->wait() == RINGRUN_OK);
    CHECK(y[0] == 2.0f);
    engine.shutdown();
  });
  CAPTURE(message);
  CHECK(code == RINGRUN_ERR_TIMEOUT);
  CHECK(message.find("'lonely'") != std::string::npos);
  CHECK(message.find("not by rank 1 (host node1)") != std::string::npos);
  CHECK(waited >= 1.4);
  CHECK(waited < 10);
}

TEST_CASE("engine: the timeline is valid JSON after every flush and holds an event for every tensor") {
  const std::string path = std::string(RINGRUN_BINARY_DIR) + "/tests/engine_timeline_test.json";
  std::remove(path.c_str());
  std::vector<std::string> names;
  for (int k = 0; k < 40; ++k) names.push_back("layer" + std::to_string(k) + ".weight \"q\"");
  bool mid_valid = false, end_valid = false;
  std::string mid_why, end_why;
  // Separate hosts (TCP): fused groups go through the fusion buffer there, so its copy phases
  // show (over shared memory the transport reads the tensors in place and there are none).
  test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    EngineConfig config = quick_config();
    config.timeline_filename = path;
    config.timeline_mark_cycles = true;
    Engine engine(comm, config);
    std::vector<std::vector<float>> bufs(names.size(), std::vector<float>(16, 1.0f));
    std::vector<engine::OpRef> states;
    for (std::size_t k = 0; k < names.size(); ++k) {
      OpRequest r;
      r.name = names[k];
      r.send = r.recv = bufs[k].data();
      r.count = 16;
      states.push_back(engine.submit(r));
    }
    for (auto& s : states) REQUIRE(s->wait() == RINGRUN_OK);
    // While the engine still runs: the file was flushed after the cycles that ran these ops.
    OpRequest barrier;
    barrier.kind = Collective::barrier;
    barrier.name = "sync.1";
    REQUIRE(engine.submit(barrier)->wait() == RINGRUN_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the flush follows the completions
    // Heartbeat cycles still mark and flush while rank 0 reads (timeline_mark_cycles): a read that
    // overlaps a flush sees it half written, so a few reads 50 ms apart; one must be whole.
    for (int attempt = 0; rank == 0 && attempt < 10 && !mid_valid; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      mid_valid = timeline_valid(path, names, mid_why);
    }
    barrier.name = "sync.2";
    REQUIRE(engine.submit(barrier)->wait() == RINGRUN_OK);
    engine.shutdown();
  });
  CHECK_MESSAGE(mid_valid, mid_why);
  end_valid = timeline_valid(path, names, end_why);
  CHECK_MESSAGE(end_valid, end_why);
  std::string text = read_file(path);
  CHECK(text.find("NEGOTIATE") != std::string::npos);
  CHECK(text.find("MEMCPY_IN_FUSION_BUFFER") != std::string::npos);
  CHECK(text.find("rank 1 ready") != std::string::npos);
  CHECK(text.find("\"QUEUE\"") != std::string::npos);
  CHECK(text.find("\"CYCLE_START\"") != std::string::npos);  // RINGRUN_TIMELINE_MARK_CYCLES
  CHECK(text.find("start_time_since_epoch_in_micros") != std::string::npos);
}

TEST_CASE("engine: shutdown with pending ops fails them on every rank and leaves no thread or socket") {
  const int threads_before = count_dir_entries("/proc/self/task");
  const int fds_before = count_dir_entries("/proc/self/fd");
  std::vector<std::string> messages(2);
  std::vector<int> codes(2);
  test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> x(4, 1.0f);
    OpRequest r;
    r.send = r.recv = x.data();
    r.count = 4;
    r.name = "only.on.rank." + std::to_string(rank);
    auto pending = engine.submit(r);
    r.name = "both";
    CHECK(engine.submit(r)->wait() == RINGRUN_OK);
    engine.shutdown();
    codes[static_cast<std::size_t>(rank)] = pending->wait();
    messages[static_cast<std::size_t>(rank)] = pending->message();
    // After shutdown, submissions are refused with a message naming the tensor.
    r.name = "late";
    try {
      engine.submit(r);
      FAIL_CHECK("submit after shutdown succeeded");
    } catch (const RuntimeError& e) {
      CHECK(std::string(e.what()).find("'late'") != std::string::npos);
    }
    comm.finalize();
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(messages[static_cast<std::size_t>(r)]);
    CHECK(codes[static_cast<std::size_t>(r)] == RINGRUN_ERR_NOT_INITIALIZED);
    CHECK(messages[static_cast<std::size_t>(r)].find("'only.on.rank." + std::to_string(r) + "'") != std::string::npos);
    CHECK(messages[static_cast<std::size_t>(r)].find("ringrun_finalize()") != std::string::npos);
  }
  CHECK(count_dir_entries("/proc/self/task") == threads_before);
  CHECK(count_dir_entries("/proc/self/fd") == fds_before);
}

TEST_CASE("engine: bad arguments and duplicate pending names are refused at submission") {
  test::run_ranks(1, Placement::one_host, [&](int, Communicator& comm) {
    Engine engine(comm, quick_config());
    std::vector<float> x(4, 1.0f);
    OpRequest r;
    r.count = 4;
    r.name = "nullbuf";
    CHECK_THROWS_WITH_AS(engine.submit(r), doctest::Contains("'nullbuf'"), RuntimeError);
    r.send = r.recv = x.data();
    r.name = "";
    CHECK_THROWS_AS(engine.submit(r), RuntimeError);
    r.kind = Collective::broadcast;
    r.name = "b";
    r.root = 3;
    CHECK_THROWS_WITH_AS(engine.submit(r), doctest::Contains("root 3"), RuntimeError);
    engine.shutdown();
  });
}
