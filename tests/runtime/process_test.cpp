// Real processes: ranks started directly (MASTER_ADDR bootstrap, rank 0 hosts the store), a rank
// killed with SIGKILL in the middle of a job, and plain `mpirun` (PMIx / OMPI_* bootstrap).
#include <doctest/doctest.h>

#include "free_port.hpp"
#include "spawned_process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>


namespace {

const std::string kRankProgram = std::string(RINGRUN_BINARY_DIR) + "/tests/runtime_test_rank";

using ringrun::test::free_port;

struct Result {
  int status = -1;
  std::string output;
};

// Runs argv with extra environment, output to a file.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, const std::string& out) {
  std::vector<std::string> env = ringrun::test::clean_environment();
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return ringrun::test::spawn_to_file(argv, env, out);
}

Result wait_for(pid_t pid, const std::string& out) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  Result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  r.output = text.str();
  return r;
}

std::vector<Result> run_direct(int n, const std::string& mode, const std::string& program = kRankProgram) {
  std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int r = 0; r < n; ++r) {
    outs.push_back(std::string(RINGRUN_BINARY_DIR) + "/tests/process_test." + (mode.empty() ? "example" : mode) + "." +
                   std::to_string(r) + ".out");
    pids.push_back(spawn(mode.empty() ? std::vector<std::string>{program} : std::vector<std::string>{program, mode},
                         {"RINGRUN_RANK=" + std::to_string(r), "RINGRUN_SIZE=" + std::to_string(n),
                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "RINGRUN_START_TIMEOUT=20"},
                         outs.back()));
  }
  std::vector<Result> results;
  for (int r = 0; r < n; ++r) results.push_back(wait_for(pids[r], outs[r]));
  return results;
}

}  // namespace

TEST_CASE("processes started directly (MASTER_ADDR): every dtype and op") {
  for (int n : {2, 3}) {
    auto results = run_direct(n, "check");
    for (int r = 0; r < n; ++r) {
      INFO("rank ", r, " of ", n, " output: ", results[r].output);
      CHECK(results[r].status == 0);
      CHECK(results[r].output.find("ok") != std::string::npos);
    }
  }
}

TEST_CASE("a rank killed mid-job makes every other rank fail within 5 s, naming it") {
  const int n = 4;
  auto results = run_direct(n, "die");
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r, " output: ", results[r].output);
    if (r == n - 2) {
      CHECK(results[r].status == 128 + SIGKILL);
      continue;
    }
    CHECK(results[r].status == 3);
    // "rank 2 (host h) closed its connection", or, when the first rank to notice has already
    // exited, "rank 0 (host h) and rank 2 (host h) closed their connections".
    CHECK(results[r].output.find("rank 2 (host") != std::string::npos);
    CHECK(results[r].output.find("closed") != std::string::npos);
    auto at = results[r].output.find("failed after ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stol(results[r].output.substr(at + 13)) < 5000);
  }
}

TEST_CASE("plain mpirun -np 4 (PMIx bootstrap)") {
  if (::access("/usr/bin/mpirun", X_OK) != 0) {
    MESSAGE("skipped: /usr/bin/mpirun not found");
    return;
  }
  std::string out = std::string(RINGRUN_BINARY_DIR) + "/tests/process_test.mpirun.out";
  pid_t pid = spawn({"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "--mca", "btl", "self,vader",
                     "--mca", "pml", "ob1", kRankProgram, "check"},
                    {"OMPI_MCA_rmaps_base_oversubscribe=1"}, out);
  Result result = wait_for(pid, out);
  INFO("mpirun output: ", result.output);
  CHECK(result.status == 0);
  for (int r = 0; r < 4; ++r)
    CHECK(result.output.find("rank " + std::to_string(r) + " of 4: local " + std::to_string(r) + " of 4: ok") !=
          std::string::npos);
}

TEST_CASE("the training example: final loss and weights under 1 and 4 ranks agree to 1e-5") {
  const std::string example = std::string(RINGRUN_BINARY_DIR) + "/bin/ringrun-example-train";
  auto last_numbers = [](const std::string& output) {
    // "epoch 15 loss L" lines and "final ranks N weights checksum C".
    auto loss_at = output.rfind(" loss ");
    auto sum_at = output.rfind("checksum ");
    REQUIRE(loss_at != std::string::npos);
    REQUIRE(sum_at != std::string::npos);
    return std::pair{std::stod(output.substr(loss_at + 6)), std::stod(output.substr(sum_at + 9))};
  };
  std::string out = std::string(RINGRUN_BINARY_DIR) + "/tests/process_test.example.single.out";
  Result single = wait_for(spawn({example}, {}, out), out);  // no launcher variables: one rank
  INFO("1 rank: ", single.output);
  REQUIRE(single.status == 0);
  auto results = run_direct(4, "", example);
  INFO("4 ranks, rank 0: ", results[0].output);
  for (auto& r : results) REQUIRE(r.status == 0);
  auto [loss1, sum1] = last_numbers(single.output);
  auto [loss4, sum4] = last_numbers(results[0].output);
  CHECK(std::abs(loss1 - loss4) < 1e-5);
  CHECK(std::abs(sum1 - sum4) < 1e-5);
  CHECK(results[0].output.find("final ranks 4") != std::string::npos);
}
