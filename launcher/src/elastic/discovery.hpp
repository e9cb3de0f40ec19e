// Running --host-discovery-script (ringrun(1), Elastic mode): one run at a time, through
// /bin/sh -c, in its own process group, its stdout read through a pipe, bounded by
// kDiscoveryTimeout. The supervisor drives a run from its poll loop (fd(), read_some(),
// on_reaped(), kill()) so that a slow script never stalls the loop; the start's runs go to the end
// in wait_for_start_hosts(). What the output means is elastic/hosts.hpp's (pure);
// this file only runs the script.
#pragma once

#include "elastic/hosts.hpp"

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// A run that takes longer is killed with its process group and counts as a failure (Horovod has
// no bound; ringrun's loop must not wait for a script that hangs).
inline constexpr std::chrono::seconds kDiscoveryTimeout{10};

class DiscoveryRun {
 public:
  // Starts `/bin/sh -c script` with `signal_mask` (the supervisor blocks its signals; the script
  // must not inherit that) and default SIGPIPE. Throws LaunchError when it cannot be started.
  DiscoveryRun(const std::string& script, const sigset_t& signal_mask, SteadyTime now);
  ~DiscoveryRun();  // kills the group and reaps the script if it is still there: no orphan
  DiscoveryRun(const DiscoveryRun&) = delete;
  DiscoveryRun& operator=(const DiscoveryRun&) = delete;

  pid_t pid() const { return pid_; }
  int fd() const { return fd_; }              // the output pipe while open, else -1
  SteadyTime deadline() const { return deadline_; }
  // Reads what the pipe has (never blocks: the pipe is non-blocking); closes it at end of file.
  void read_some();
  // waitpid reported the script's status (the supervisor reaps every child with waitpid(-1)).
  void on_reaped(int wait_status);
  // The deadline passed: SIGKILL the group and reap the script (it cannot outlive SIGKILL long).
  void kill_for_timeout();
  // The result once the script exited and its output ended (or it was killed); else nullopt.
  std::optional<DiscoveryResult> result() const;

 private:
  std::string output_;
  pid_t pid_ = -1;
  int fd_ = -1;
  SteadyTime deadline_;
  std::optional<int> status_;
  bool timed_out_ = false;
  bool too_long_ = false;
};

// The job's start: runs the script until it offers at least `min_np` slots, once a second for at
// most `timeout_s` (--elastic-timeout; Horovod's wait_for_available_slots), saying so in one line
// when the first run offers fewer. The slots counted are this host's until a run names another
// host, or from the start where `other_hosts` (--launcher mpirun) says the job may use them.
// The first run's failure throws InputError (exit 2); later failures are retried (one line per
// run of failures); running out of time throws LaunchError (exit 1), SIGINT/SIGTERM/SIGHUP
// LaunchError (128+signal).
struct StartHosts {
  std::vector<HostSlots> hosts;  // as the run that offered enough printed them
  bool other_hosts = false;      // every host's slots count (the job starts through mpirun)
};
StartHosts wait_for_start_hosts(const std::string& script, int slots_per_host, const std::string& self, int min_np,
                                double timeout_s, bool other_hosts,
                                double interval_s = DiscoveryPollPolicy::kIntervalSeconds);

}  // namespace ringrun
