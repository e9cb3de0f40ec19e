// The engine through the C API in real processes (MASTER_ADDR bootstrap): see test_engine_rank.cpp.
#include <doctest/doctest.h>

#include "free_port.hpp"
#include "spawned_process.hpp"

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


namespace {

using ringrun::test::free_port;

pid_t spawn(const std::string& program, const std::vector<std::string>& extra_env, const std::string& out) {
  std::vector<std::string> env = ringrun::test::clean_environment();
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return ringrun::test::spawn_to_file({program}, env, out);
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
