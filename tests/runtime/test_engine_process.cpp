// The engine through the C API in real processes (MASTER_ADDR bootstrap): see test_engine_rank.cpp.
#include <doctest/doctest.h>

#include "free_port.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using ringrun::test::free_port;

pid_t spawn(const std::string& program, const std::vector<std::string>& extra_env, const std::string& out) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (entry.rfind("RINGRUN_", 0) == 0 || entry.rfind("OMPI_", 0) == 0 || entry.rfind("PMIX_", 0) == 0 ||
        entry.rfind("SLURM_", 0) == 0 || entry.rfind("MASTER_", 0) == 0)
      continue;
    env.push_back(entry);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> args{const_cast<char*>(program.c_str()), nullptr}, envp;
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", program);
  return pid;
}

}  // namespace

TEST_CASE("engine through the C API: 3 processes, async ops from two threads, sync calls, finalize with a pending op") {
  const std::string program = std::string(RINGRUN_BINARY_DIR) + "/tests/runtime_engine_test_rank";
  constexpr int kRanks = 3;
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  std::vector<std::string> outputs;
  for (int r = 0; r < kRanks; ++r) {
    outputs.push_back(std::string(RINGRUN_BINARY_DIR) + "/tests/engine_rank" + std::to_string(r) + ".out");
    pids.push_back(spawn(program,
                         {"RINGRUN_RANK=" + std::to_string(r), "RINGRUN_SIZE=" + std::to_string(kRanks),
                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "RINGRUN_START_TIMEOUT=20",
                          // Decimal values, as the launcher passes --fusion-threshold-mb 0.5 and kin.
                          "RINGRUN_FUSION_THRESHOLD_MB=0.5", "RINGRUN_CYCLE_TIME_MS=0.5",
                          "RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS=30.5", "RINGRUN_TIMELINE_MARK_CYCLES=1"},
                         outputs.back()));
  }
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
    std::ifstream in(outputs[static_cast<std::size_t>(r)]);
    std::stringstream text;
    text << in.rdbuf();
    CAPTURE(text.str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(text.str().find("engine rank " + std::to_string(r) + ": ok") != std::string::npos);
  }
}
