// The engine's stall warning with no shutdown time: a rank that submits a named op late makes rank
// 0 print "ringrun: stall warning: ..." on stderr, and the op still completes once it arrives.
// Ranks as threads (rank_threads.hpp, stderr captured into a file), and as processes through the C
// API (test_engine_stall_rank.cpp), where the late op is a rank's first named op.
#include <doctest/doctest.h>

#include "free_port.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "rank_threads.hpp"
#include "ringrun/ringrun.h"

using namespace ringrun;
using core::Communicator;
using engine::Engine;
using engine::EngineConfig;
using engine::OpRequest;
using test::Placement;

extern char** environ;

namespace {

// Redirects this process's stderr (fd 2) into a file until text() is called.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE_MESSAGE(fd >= 0, "cannot create ", path_);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

struct LateResult {
  std::string stderr_text;
  std::vector<int> codes = std::vector<int>(2, -1);
  std::vector<float> sums = std::vector<float>(2, 0.0f);
};

// Two ranks; `late_rank` submits `name` `delay` after the other. With `warm_up`, the name is
// used once on time first, so the late round goes through the response cache (cache bits, the
// lone op's record writer) rather than full descriptions.
LateResult run_late_submission(int late_rank, const std::string& name, bool warm_up, std::chrono::milliseconds delay) {
  LateResult result;
  StderrCapture capture(std::string(RINGRUN_BINARY_DIR) + "/tests/engine_stall_stderr_" + name + ".txt");
  test::run_ranks(2, Placement::separate_hosts, [&](int rank, Communicator& comm) {
    EngineConfig config;
    config.idle_heartbeat = std::chrono::milliseconds(20);
    config.stall_warning = std::chrono::milliseconds(1000);
    config.stall_shutdown = std::chrono::milliseconds(0);  // warn only, never fail
    Engine engine(comm, config);
    std::vector<float> x(4, static_cast<float>(rank + 1)), y(4, 0.0f);
    OpRequest r;
    r.name = name;
    r.send = x.data();
    r.recv = y.data();
    r.count = 4;
    if (warm_up) REQUIRE(engine.submit(r)->wait() == RINGRUN_OK);
    if (rank == late_rank) std::this_thread::sleep_for(delay);
    result.codes[static_cast<std::size_t>(rank)] = engine.submit(r)->wait();
    result.sums[static_cast<std::size_t>(rank)] = y[0];
    engine.shutdown();
  });
  result.stderr_text = capture.text();
  return result;
}

void check_warned_and_completed(const LateResult& result, const std::string& name, int late_rank) {
  CAPTURE(result.stderr_text);
  const std::string warning = "ringrun: stall warning: tensor '" + name + "'";
  CHECK(result.stderr_text.find(warning) != std::string::npos);
  CHECK(result.stderr_text.find("not by rank " + std::to_string(late_rank)) != std::string::npos);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(result.codes[static_cast<std::size_t>(rank)] == RINGRUN_OK);
    CHECK(result.sums[static_cast<std::size_t>(rank)] == 3.0f);
  }
}

// The ranks' programs through the C API: `kRanks` processes over MASTER_ADDR, rank `late_rank`
// submitting its first named op late; each rank's stdout and stderr go to one file per rank.
using ringrun::test::free_port;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Returns each rank's output; CHECKs that every rank exited 0.
std::vector<std::string> run_late_processes(int late_rank, std::chrono::milliseconds delay) {
  constexpr int kRanks = 2;
  const std::string program = std::string(RINGRUN_BINARY_DIR) + "/tests/runtime_engine_stall_rank";
  const std::string port = std::to_string(free_port());
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("RINGRUN_", 0) != 0 && entry.rfind("OMPI_", 0) != 0 && entry.rfind("PMIX_", 0) != 0 &&
        entry.rfind("SLURM_", 0) != 0 && entry.rfind("MASTER_", 0) != 0)
      base_env.push_back(entry);
  }
  std::vector<pid_t> pids;
  std::vector<std::string> outputs;
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> env = base_env;
    env.insert(env.end(), {"RINGRUN_RANK=" + std::to_string(r), "RINGRUN_SIZE=" + std::to_string(kRanks),
                           "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "RINGRUN_START_TIMEOUT=20",
                           "RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS=1"});  // and no shutdown time
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string late = std::to_string(late_rank), ms = std::to_string(delay.count());
    std::vector<char*> args{const_cast<char*>(program.c_str()), late.data(), ms.data(), nullptr};
    outputs.push_back(std::string(RINGRUN_BINARY_DIR) + "/tests/engine_stall_rank" + std::to_string(r) + ".out");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, outputs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "cannot start ", program);
    pids.push_back(pid);
  }
  std::vector<std::string> texts;
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
    texts.push_back(read_all(outputs[static_cast<std::size_t>(r)]));
    CAPTURE(texts.back());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(texts.back().find("stall rank " + std::to_string(r) + ": ok") != std::string::npos);
  }
  return texts;
}

void check_rank0_warned(const std::vector<std::string>& outputs, int late_rank) {
  REQUIRE(outputs.size() == 2);
  CAPTURE(outputs[0]);
  CHECK(outputs[0].find("ringrun: stall warning: tensor 'late.first'") != std::string::npos);
  CHECK(outputs[0].find("not by rank " + std::to_string(late_rank)) != std::string::npos);
  CHECK(outputs[1].find("stall warning") == std::string::npos);  // rank 0 alone reports stalls
}

constexpr std::chrono::milliseconds kLate{2500};

}  // namespace

TEST_CASE("engine: no shutdown time: rank 1 submits late, rank 0 warns, the op completes") {
  check_warned_and_completed(run_late_submission(1, "late.on1", false, kLate), "late.on1", 1);
}

TEST_CASE("engine: no shutdown time: a cached name submitted late by rank 0 warns and completes") {
  check_warned_and_completed(run_late_submission(0, "cached.on0", true, kLate), "cached.on0", 0);
}

// A rank's first named op is late: its engine must already run (ringrun_init starts it), or the
// other rank's engine waits in its first negotiation and nobody checks for stalls.
TEST_CASE("engine through the C API: rank 1's first named op is late: rank 0 warns, the op completes") {
  check_rank0_warned(run_late_processes(1, kLate), 1);
}

TEST_CASE("engine through the C API: rank 0's first named op is late: rank 0 warns, the op completes") {
  check_rank0_warned(run_late_processes(0, kLate), 0);
}
