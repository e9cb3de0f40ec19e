// The parts the two supervisors share: supervise() (a fixed set of processes, supervisor.cpp) and
// run_elastic() (a changing set, elastic/job.cpp).
#pragma once

#include "supervisor/rank_spawn.hpp"

#include <ringrun/process.hpp>

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>

namespace ringrun {

// The rank's launch record, built before the clone (the child may only make system calls):
// argv, environment, CPU set, and for --mem-bind local the set_mempolicy mask of the NUMA nodes
// the plan named in RINGRUN_MEM_BIND_NODES. The pointers in it point into `spec`.
RankLaunch rank_launch(const ProcessSpec& spec, const sigset_t& exec_mask, pid_t parent);

// The one-line error for a process whose binding or exec failed in the child.
LaunchError spawn_error(const ProcessSpec& spec, const SpawnFailure& failure);

// Where a rank's stdin comes from: the terminal's when the spec asks for it and it is not a tty,
// else `devnull`; and what every rank of one supervisor is started with.
struct RankStart {
  sigset_t exec_mask;
  pid_t parent = -1;
  int devnull = -1;
  bool stdin_is_tty = false;
};

// A rank started by start_rank: its pid (-1: it could not be cloned, `spawn_errno` says why) and
// the read ends of its stdout and stderr; `failure` says whether binding or exec failed in the
// child (then it has exited and must still be reaped). On either failure the pipes are closed.
struct StartedRank {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  int spawn_errno = 0;
  SpawnFailure failure;
  bool ok() const { return pid > 0 && failure.step == SpawnFailure::none; }
};

// The one way both supervisors start a rank: its output into two pipes, under `guard` (a slot
// reserved, or given back when the clone fails), in a process group of its own.
StartedRank start_rank(const ProcessSpec& spec, const RankStart& start, RankGuard& guard);

// The signals a supervisor takes through its signalfd: SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2.
sigset_t supervisor_signals();

// Before anything starts: sleeps until `until`, or until SIGINT, SIGTERM or SIGHUP is pending
// (main() blocked them, so they wait as pending signals); returns that signal, taken, else 0.
// Other pending signals are taken and ignored. Every wait before the start answers Ctrl-C this way.
int stop_signal_before(std::chrono::steady_clock::time_point until);

// The mask the processes the supervisor starts get back before exec: the one ringrun started with
// when block_supervisor_signals() ran, else `current` (the mask before the supervisor blocked its
// signals).
sigset_t exec_signal_mask(const sigset_t& current);

// A supervisor's signals for as long as it runs: supervisor_signals() blocked and read from fd()
// (so its loop is the only place that reacts to them), SIGPIPE ignored (a reader that went away
// is not ringrun's death). The destructor closes the fd and gives the process the mask it started
// with and SIGPIPE's old action back. Throws LaunchError when the signalfd cannot be made.
class SignalRoute {
 public:
  SignalRoute();
  ~SignalRoute();
  SignalRoute(const SignalRoute&) = delete;
  SignalRoute& operator=(const SignalRoute&) = delete;

  int fd() const { return fd_; }
  // The mask the processes the supervisor starts get back before exec (exec_signal_mask).
  const sigset_t& exec_mask() const { return exec_mask_; }

 private:
  int fd_ = -1;
  sigset_t exec_mask_{};
  struct sigaction old_pipe_ {};
};

}  // namespace ringrun
