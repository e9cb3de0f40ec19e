// The guard (supervisor/rank_spawn.hpp): a rank names its process group to the guard itself,
// before it execs, so a ringrun SIGKILLed the moment spawn_rank returns leaves nothing running.
#include "supervisor/rank_spawn.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ringrun;
using namespace std::chrono_literals;

extern char** environ;

namespace {

// Alive and not a zombie waiting for init to reap it (kill(pid, 0) succeeds on a zombie).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto state = line.rfind(')');
  return state != std::string::npos && state + 2 < line.size() && line[state + 2] != 'Z';
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// Starts `sh -c script` as ringrun starts a rank, with `slot` for the guard.
pid_t start_shell(std::string script, pid_t* slot) {
  std::string arg0 = "sh", arg1 = "-c";
  RankLaunch launch;
  launch.executable = "/bin/sh";
  launch.argv = {arg0.data(), arg1.data(), script.data(), nullptr};
  for (char** e = environ; *e; ++e) launch.envp.push_back(*e);
  launch.envp.push_back(nullptr);
  launch.in_fd = STDIN_FILENO;
  launch.out_fd = STDOUT_FILENO;
  launch.err_fd = STDERR_FILENO;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &launch.exec_mask);
  launch.parent = ::getpid();
  launch.guard_slot = slot;
  SpawnFailure failure;
  const pid_t pid = spawn_rank(launch, failure);
  return failure.step == SpawnFailure::none ? pid : -1;
}

}  // namespace

TEST_CASE("a rank's guard slot holds its process group once spawn_rank returns") {
  RankGuard guard(2);
  pid_t* slot = guard.reserve();
  REQUIRE(slot != nullptr);
  const pid_t pid = start_shell("exit 0", slot);
  REQUIRE(pid > 0);
  CHECK(*slot == pid);
  int status = 0;
  CHECK(::waitpid(pid, &status, 0) == pid);
  guard.unwatch(pid);
  CHECK(*slot == 0);
  guard.release();
}

TEST_CASE("a launcher SIGKILLed right after spawn_rank returns: the guard ends what the rank started") {
  char dir_template[] = "/tmp/ringrun-guard-test.XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, pidfile = dir + "/sleep.pid";
  // The stand-in for ringrun: it starts the rank, waits until the rank's own child runs, and dies
  // with no other step (nothing names the rank to the guard after the spawn).
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    RankGuard guard(1);
    const std::string script = "sleep 300 & echo $! > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile + "; wait";
    if (start_shell(script, guard.reserve()) < 0) ::_exit(3);
    for (int i = 0; i < 1000 && ::access(pidfile.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(10ms);
    ::raise(SIGKILL);
    ::_exit(4);
  }
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  CHECK(WIFSIGNALED(status));
  const pid_t sleeper = read_pid(pidfile);
  REQUIRE(sleeper > 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = !running(sleeper);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  if (!gone) ::kill(sleeper, SIGKILL);  // the test's own mess, whatever it concludes
  CHECK(gone);
  std::remove(pidfile.c_str());
  ::rmdir(dir.c_str());
}
