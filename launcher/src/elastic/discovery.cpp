// Running --host-discovery-script: process, pipe, timeout (elastic/discovery.hpp).
#include "elastic/discovery.hpp"

#include "common/subprocess.hpp"

#include "supervisor/parts.hpp"
#include "supervisor/rank_spawn.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ringrun {
namespace {

// More output than any host list: the rest is dropped and the run fails, rather than growing
// ringrun's memory without bound.
constexpr std::size_t kMaxOutput = 1 << 20;

}  // namespace

DiscoveryRun::DiscoveryRun(const std::string& script, const sigset_t& signal_mask, SteadyTime now)
    : deadline_(now + kDiscoveryTimeout) {
  // stderr shared with ringrun's (the script's own complaints are the best description of its
  // failure); its own group, so that a timeout kills what it started too.
  ProgramCall call;
  call.executable = "/bin/sh";
  call.argv = {"sh", "-c", script};
  call.error_output = ErrorOutput::inherited;
  call.own_group = true;
  call.signal_mask = &signal_mask;
  int error = 0;
  const auto started = start_program(call, &error);
  if (!started)
    throw LaunchError(fmt::format("ringrun: --host-discovery-script '{}': cannot start /bin/sh: {}", script,
                                  std::strerror(error)), 1);
  pid_ = started->pid;
  fd_ = started->output_fd;
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

DiscoveryRun::~DiscoveryRun() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0 && !status_) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void DiscoveryRun::read_some() {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n > 0) {
      const std::size_t room = kMaxOutput - std::min(kMaxOutput, output_.size());
      too_long_ = too_long_ || static_cast<std::size_t>(n) > room;
      output_.append(buffer, std::min(static_cast<std::size_t>(n), room));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    ::close(fd_);  // end of file, or an error that ends the output alike
    fd_ = -1;
    return;
  }
}

void DiscoveryRun::on_reaped(int wait_status) {
  status_ = wait_status;
  // What the script left in its group goes with it: a run leaves nothing behind.
  ::kill(-pid_, SIGKILL);
}

void DiscoveryRun::kill_for_timeout() {
  timed_out_ = true;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (status_) return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
}

std::optional<DiscoveryResult> DiscoveryRun::result() const {
  if (!status_ || (fd_ >= 0 && !timed_out_)) return std::nullopt;
  DiscoveryResult r;
  if (timed_out_) {
    r.error = fmt::format("did not finish within {} s", kDiscoveryTimeout.count());
  } else if (!WIFEXITED(*status_) || WEXITSTATUS(*status_) != 0) {
    r.error = describe_status(*status_);
  } else if (too_long_) {
    r.error = fmt::format("printed more than {} bytes", kMaxOutput);
  } else {
    r.ok = true;
    r.output = output_;
  }
  return r;
}

namespace {

// Runs the script to the end (the start's runs, before anything starts), its group watched by
// `guard`.
DiscoveryResult run_discovery_script(const std::string& script, RankGuard& guard) {
  sigset_t mask;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  // Not ringrun's own mask (main() blocks the supervisor's signals): the script's is the caller's.
  DiscoveryRun run(script, exec_signal_mask(mask), std::chrono::steady_clock::now());
  guard.watch(run.pid());
  for (;;) {
    if (auto r = run.result()) {
      guard.unwatch(run.pid());
      return *r;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= run.deadline()) {
      run.kill_for_timeout();
      continue;
    }
    if (run.fd() >= 0) {
      pollfd p{run.fd(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(run.deadline() - now).count() + 1;
      ::poll(&p, 1, static_cast<int>(left));
      run.read_some();
      continue;
    }
    int status = 0;
    const pid_t done = ::waitpid(run.pid(), &status, WNOHANG);
    if (done == run.pid()) run.on_reaped(status);
    else ::usleep(10'000);  // output ended; the script is still exiting
  }
}

void tell(const std::string& line) {
  const std::string text = line + "\n";
  (void)!::write(STDERR_FILENO, text.data(), text.size());
}

// Sleeps until `until` (the next run, at most --elastic-timeout away), or throws LaunchError
// (128+signal) for SIGINT, SIGTERM or SIGHUP: main() blocked them, so they wait here as pending
// signals and nothing has started.
void pause_for_next_run(SteadyTime until) {
  if (const int sig = stop_signal_before(until))
    throw LaunchError(fmt::format("ringrun: elastic: {} while waiting for --min-np slots; no process started",
                                  ::sigabbrev_np(sig) ? fmt::format("SIG{}", ::sigabbrev_np(sig)) : "a signal"),
                      128 + sig);
}

}  // namespace

StartHosts wait_for_start_hosts(const std::string& script, int slots_per_host, const std::string& self, int min_np,
                                double timeout_s, bool other_hosts, double interval_s) {
  // The runs before any rank, under a guard as the ranks are: a ringrun SIGKILLed during one leaves
  // nothing the script started.
  RankGuard guard(1);
  StartHosts start;
  start.hosts = first_discovered_hosts(run_discovery_script(script, guard), script, slots_per_host);
  start.other_hosts = other_hosts || !split_local_hosts(start.hosts, self).foreign.empty();
  // Once a run names another host, every host's slots count; until then this host's.
  auto offered = [&] { return start.other_hosts ? total_slots(start.hosts) : split_local_hosts(start.hosts, self).slots; };
  int found = offered();
  if (found >= min_np) {
    guard.release();
    return start;
  }
  const std::string origin = fmt::format("--host-discovery-script '{}'", script);
  tell(fmt::format("ringrun: elastic: {} offers {} slot{}{}, fewer than the {} the job starts with "
                   "(--min-np, else -np); waiting up to {} s (--elastic-timeout) for more",
                   origin, found, found == 1 ? "" : "s", start.other_hosts ? "" : " of this host", min_np, timeout_s));
  const SteadyTime give_up = std::chrono::steady_clock::now() +
                             std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(timeout_s));
  bool failing = false;
  while (found < min_np) {
    const SteadyTime now = std::chrono::steady_clock::now();
    if (now >= give_up)
      throw LaunchError(fmt::format("ringrun: elastic: {}; no process started",
                                    elastic_timeout_message(found, min_np, timeout_s)),
                        1);
    pause_for_next_run(std::min(give_up, now + std::chrono::duration_cast<SteadyTime::duration>(
                                                    std::chrono::duration<double>(interval_s))));
    const DiscoveryResult result = run_discovery_script(script, guard);
    try {
      if (!result.ok) throw InputError(result.error);
      start.hosts = parse_discovered_hosts(result.output, slots_per_host, origin);
      start.other_hosts = start.other_hosts || !split_local_hosts(start.hosts, self).foreign.empty();
      found = offered();
      failing = false;
    } catch (const InputError& e) {
      if (!failing)
        tell(fmt::format("ringrun: elastic: {} failed ({}); retrying {}", origin, e.what(),
                         DiscoveryPollPolicy::every(interval_s)));
      failing = true;
    }
  }
  guard.release();
  return start;
}

}  // namespace ringrun
