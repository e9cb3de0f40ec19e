// The launcher's one way to ask another program (srun, scontrol, mpirun, python3): its output,
// its exit, its deadline, and finding it in PATH.
#include "common/subprocess.hpp"

#include <ringrun/process.hpp>

#include <doctest/doctest.h>

#include <chrono>

using namespace ringrun;
using namespace std::chrono_literals;

namespace {

ProgramCall shell(const std::string& script, ErrorOutput error_output = ErrorOutput::captured) {
  return ProgramCall{"/bin/sh", {"sh", "-c", script}, std::nullopt, 10s, error_output};
}

}  // namespace

TEST_CASE("run_program captures the output and the exit code") {
  auto result = run_program(shell("echo out; echo err >&2; exit 3"));
  REQUIRE(result);
  CHECK(result->exit_code() == 3);
  CHECK_FALSE(result->timed_out);
  CHECK(result->output == "out\nerr\n");
}

TEST_CASE("run_program discards stderr when asked, and reads stdin from /dev/null") {
  auto result = run_program(shell("echo err >&2; cat; echo out", ErrorOutput::discarded));
  REQUIRE(result);
  CHECK(result->exit_code() == 0);
  CHECK(result->output == "out\n");
}

TEST_CASE("run_program gives the program the environment it is given, else ringrun's") {
  ProgramCall call = shell("echo \"$RINGRUN_SUBPROCESS_TEST\"");
  call.env = Environment{{"RINGRUN_SUBPROCESS_TEST", "given"}};
  auto given = run_program(call);
  REQUIRE(given);
  CHECK(given->output == "given\n");
  ::setenv("RINGRUN_SUBPROCESS_TEST", "inherited", 1);
  auto inherited = run_program(shell("echo \"$RINGRUN_SUBPROCESS_TEST\""));
  ::unsetenv("RINGRUN_SUBPROCESS_TEST");
  REQUIRE(inherited);
  CHECK(inherited->output == "inherited\n");
}

TEST_CASE("run_program kills the program at its deadline") {
  ProgramCall call = shell("echo started; exec sleep 30");
  call.timeout = 200ms;
  const auto start = std::chrono::steady_clock::now();
  auto result = run_program(call);
  REQUIRE(result);
  CHECK(result->timed_out);
  CHECK_FALSE(result->exit_code());
  CHECK(exit_code_of(result->wait_status) == 128 + 9);
  CHECK(result->output == "started\n");
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("run_program says when a program cannot be started") {
  CHECK_FALSE(run_program(ProgramCall{"/nonexistent/program", {"program"}, std::nullopt, 1s}));
}

TEST_CASE("find_in_path and resolve_program search PATH as execvp does") {
  CHECK(find_in_path("sh", "/nonexistent:/bin") == "/bin/sh");
  CHECK_FALSE(find_in_path("bin", "/"));  // a directory is not a program
  CHECK_FALSE(find_in_path("no-such-program-here", "/bin"));
  CHECK(resolve_program("sh", "/nonexistent:/bin") == "/bin/sh");
  try {
    resolve_program("no-such-program-here", "/bin");
    FAIL("resolve_program found a program that does not exist");
  } catch (const LaunchError& e) {
    CHECK(e.exit_code == 127);
  }
  CHECK(search_path(Environment{{"PATH", "/opt/bin"}}) == "/opt/bin");
  CHECK(search_path(Environment{}) == kDefaultPath);
}

TEST_CASE("describe_status and exit_code_of read a wait status as the summary line does") {
  auto exited = run_program(shell("exit 4"));
  REQUIRE(exited);
  CHECK(describe_status(exited->wait_status) == "exited with code 4");
  CHECK(exit_code_of(exited->wait_status) == 4);
  auto killed = run_program(shell("kill -TERM $$"));
  REQUIRE(killed);
  CHECK(describe_status(killed->wait_status) == "was killed by signal 15 (SIGTERM)");
  CHECK(exit_code_of(killed->wait_status) == 128 + 15);
}
