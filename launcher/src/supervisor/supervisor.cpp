#include "common/subprocess.hpp"
#include "supervisor/output.hpp"
#include "supervisor/parts.hpp"

#include <ringrun/supervisor.hpp>
#include <ringrun/topology.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <vector>

namespace ringrun {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  const ProcessSpec* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

// Output files first: a directory we cannot write is a usage error, and nothing has started.
void open_rank_files(RankFiles& files, const std::vector<ProcessSpec>& processes, const SupervisorOptions& options) {
  if (!options.output_directory) return;
  files.dir = std::filesystem::path(*options.output_directory);
  for (const auto& p : processes) {
    if (p.retag != OutputRetag::none) continue;
    std::filesystem::path dir = *files.dir / fmt::format("rank.{}", p.rank);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || files.get(p.rank, 1) < 0 || files.get(p.rank, 2) < 0)
      throw LaunchError(fmt::format("ringrun: --output-filename: cannot create '{}': {}", dir.string(),
                                    ec ? ec.message() : std::strerror(errno)), 2);
  }
}

// One supervise() call: the processes it started, their output streams, and how the job is ending.
class Supervision {
 public:
  Supervision(const std::vector<ProcessSpec>& processes, const SupervisorOptions& options)
      : processes_(processes), options_(options), children_(processes.size()) {
    open_rank_files(files_, processes, options);
    streams_.reserve(processes.size() * 2);
  }

  // Starts the guard and every process; on a failure stops the ones started and throws.
  void start(const sigset_t& exec_mask);
  // Until every process has exited and its pipes are closed (or held past the drain time).
  void run(int signal_fd);
  // Kills what the processes left in their groups and releases the guard.
  void end();
  // The summary line for a failure or a signal (on stderr), and ringrun's exit status.
  int report() const;

 private:
  int stop_all(int sig);    // signals every running process; returns the ranks they carry
  int begin_stop(int sig);  // stop_all, and SIGKILL whatever is left after the grace period
  [[noreturn]] void abandon_start(const LaunchError& error);
  int poll_timeout(Clock::time_point now) const;
  void read_streams(const std::vector<pollfd>& fds, const std::vector<std::size_t>& stream_of);
  void close_streams();
  void take_signals(int signal_fd);
  void reap();
  int report_failure(const Child& c) const;

  const std::vector<ProcessSpec>& processes_;
  const SupervisorOptions& options_;
  RankFiles files_;
  std::optional<RankGuard> guard_;
  std::vector<Child> children_;
  std::vector<Stream> streams_;
  ReportedFailure reported_;
  std::size_t running_ = 0;
  std::optional<std::size_t> first_failure_;
  int stopped_others_ = 0;
  int interrupted_by_ = 0;
  int stopped_on_signal_ = 0;
  std::optional<Clock::time_point> kill_at_;      // SIGKILL the rest at this time
  std::optional<Clock::time_point> drain_until_;  // all exited; wait this long for pipes to close
  std::vector<char> chunk_ = std::vector<char>(1 << 16);
};

int Supervision::stop_all(int sig) {
  int ranks = 0;
  for (auto& c : children_)
    if (c.running) {
      ::kill(-c.pid, sig);
      // An srun or mpirun carries every rank it started: the summary counts ranks.
      ranks += c.spec->rank_hosts.empty() ? 1 : static_cast<int>(c.spec->rank_hosts.size());
    }
  return ranks;
}

int Supervision::begin_stop(int sig) {
  int n = stop_all(sig);
  if (!kill_at_)
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_period_s));
  return n;
}

void Supervision::abandon_start(const LaunchError& error) {
  stop_all(SIGKILL);
  for (auto& c : children_)
    if (c.running) ::waitpid(c.pid, nullptr, 0);
  guard_->release();
  throw error;
}

void Supervision::start(const sigset_t& exec_mask) {
  guard_.emplace(processes_.size());
  const bool stdin_is_tty = ::isatty(STDIN_FILENO);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const RankStart how{exec_mask, ::getpid(), devnull, stdin_is_tty};
  for (std::size_t i = 0; i < processes_.size(); ++i) {
    const ProcessSpec& spec = processes_[i];
    const StartedRank started = start_rank(spec, how, *guard_);
    if (started.pid < 0)
      abandon_start(LaunchError(fmt::format("ringrun: starting rank {}: {}", spec.rank, std::strerror(started.spawn_errno)), 1));
    children_[i] = Child{&spec, started.pid, true, 0};
    ++running_;
    // exec failed after resolve_program said it would work (e.g. a bad interpreter line), or binding did.
    if (!started.ok()) abandon_start(spawn_error(spec, started.failure));
    std::string label = spec.label == "rank" ? fmt::format("[{}]", spec.rank) : fmt::format("[{}]", spec.label);
    RankFiles* rank_files = options_.output_directory ? &files_ : nullptr;
    streams_.emplace_back(started.out_fd, STDOUT_FILENO, spec.rank, label, spec.retag, options_.tag_output, rank_files,
                          nullptr);
    streams_.back().timestamp = options_.timestamp_output;
    streams_.emplace_back(started.err_fd, STDERR_FILENO, spec.rank, label, spec.retag, options_.tag_output, rank_files,
                          spec.retag != OutputRetag::none ? &reported_ : nullptr);
    streams_.back().timestamp = options_.timestamp_output;
  }
  if (devnull >= 0) ::close(devnull);
}

int Supervision::poll_timeout(Clock::time_point now) const {
  int timeout_ms = -1;
  for (auto deadline : {kill_at_, drain_until_})
    if (deadline) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now).count();
      ms = std::max<long long>(ms + 1, 0);
      timeout_ms = timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
    }
  return timeout_ms;
}

void Supervision::run(int signal_fd) {
  for (;;) {
    std::size_t open_streams = 0;
    for (auto& s : streams_)
      if (s.fd >= 0) ++open_streams;
    if (running_ == 0 && open_streams == 0) break;
    if (running_ == 0 && !drain_until_) drain_until_ = Clock::now() + std::chrono::seconds(2);

    std::vector<pollfd> fds;
    fds.push_back({signal_fd, POLLIN, 0});
    std::vector<std::size_t> stream_of;
    for (std::size_t i = 0; i < streams_.size(); ++i)
      if (streams_[i].fd >= 0) {
        fds.push_back({streams_[i].fd, POLLIN, 0});
        stream_of.push_back(i);
      }
    int ready = ::poll(fds.data(), fds.size(), poll_timeout(Clock::now()));
    if (ready < 0 && errno != EINTR) break;

    const auto now = Clock::now();
    if (kill_at_ && now >= *kill_at_) {
      stop_all(SIGKILL);
      kill_at_.reset();
    }
    if (drain_until_ && now >= *drain_until_) {
      // Every rank has exited but something they started still holds the pipes: end it.
      for (auto& c : children_) ::kill(-c.pid, SIGKILL);
      close_streams();
      continue;
    }
    if (ready <= 0) continue;
    read_streams(fds, stream_of);
    if (fds[0].revents & POLLIN) {
      take_signals(signal_fd);
      reap();
    }
  }
}

void Supervision::close_streams() {
  for (auto& s : streams_)
    if (s.fd >= 0) {
      s.feed({}, true);
      ::close(s.fd);
      s.fd = -1;
    }
}

void Supervision::read_streams(const std::vector<pollfd>& fds, const std::vector<std::size_t>& stream_of) {
  for (std::size_t k = 1; k < fds.size(); ++k) {
    if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    streams_[stream_of[k - 1]].read_once(chunk_);
  }
}

void Supervision::take_signals(int signal_fd) {
  signalfd_siginfo info;
  while (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      // Slurm's --signal=B:USR1@T asks for a checkpoint: pass it on, the job goes on.
      for (auto& c : children_)
        if (c.running) ::kill(-c.pid, sig);
      continue;
    }
    if (interrupted_by_ || first_failure_) {
      stop_all(SIGKILL);  // a second signal: the user does not want to wait for the grace period
    } else {
      interrupted_by_ = sig;
      stopped_on_signal_ = begin_stop(sig);
    }
  }
}

void Supervision::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (std::size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      if (c.pid != pid || !c.running) continue;
      c.running = false;
      c.status = status;
      --running_;
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !first_failure_ && !interrupted_by_) {
        first_failure_ = i;
        stopped_others_ = begin_stop(SIGTERM);
      }
    }
  }
}

void Supervision::end() {
  // Whatever a rank left behind in its process group goes with it.
  for (auto& c : children_) ::kill(-c.pid, SIGKILL);
  guard_->release();
}

int Supervision::report_failure(const Child& c) const {
  std::string others = stopped_others_ == 1 ? "1 other rank" : fmt::format("{} other ranks", stopped_others_);
  if (c.spec->label != "rank" && reported_.rank) {
    // srun/mpirun named the rank; they stopped the others themselves (--kill-on-bad-exit).
    int r = *reported_.rank;
    const auto& hosts = c.spec->rank_hosts;
    std::string host = !reported_.host.empty() ? reported_.host
                       : (r >= 0 && static_cast<std::size_t>(r) < hosts.size()) ? hosts[static_cast<std::size_t>(r)]
                                                                                 : "?";
    int stopped = hosts.empty() ? 0 : static_cast<int>(hosts.size()) - 1;
    std::string line = fmt::format("ringrun: rank {} (host {}) {}; stopped {} other rank{}\n", r, host, reported_.what,
                                   stopped, stopped == 1 ? "" : "s");
    write_all(STDERR_FILENO, line.data(), line.size());
    // The failing rank's own status, as the local backend returns it (not srun's worst task).
    return reported_.exit_status.value_or(exit_code_of(c.status));
  }
  std::string line =
      c.spec->label == "rank"
          ? fmt::format("ringrun: rank {} (host {}) {}; stopped {}\n", c.spec->rank, c.spec->host,
                        describe_status(c.status), others)
          // srun/mpirun stopped the other ranks themselves but named no rank: mpirun 4.1 under
          // load sometimes prints only "1 process returned a non-zero exit code" (its exit
          // status is then the first failure's).
          : fmt::format("ringrun: {} {} without naming the failing rank; stopped the others\n", c.spec->label,
                        describe_status(c.status));
  write_all(STDERR_FILENO, line.data(), line.size());
  return exit_code_of(c.status);
}

int Supervision::report() const {
  if (first_failure_) return report_failure(children_[*first_failure_]);
  if (interrupted_by_) {
    const char* name = sigabbrev_np(interrupted_by_);
    std::string line = fmt::format("ringrun: received SIG{}; stopped {} rank{}\n", name ? name : "?",
                                   stopped_on_signal_, stopped_on_signal_ == 1 ? "" : "s");
    write_all(STDERR_FILENO, line.data(), line.size());
    return 128 + interrupted_by_;
  }
  return 0;
}

}  // namespace

int supervise(const std::vector<ProcessSpec>& processes, const SupervisorOptions& options) {
  Supervision job(processes, options);
  {
    SignalRoute signals;
    job.start(signals.exec_mask());
    job.run(signals.fd());
    job.end();
  }  // the signal mask and SIGPIPE's action restored before the summary is written
  return job.report();
}

}  // namespace ringrun
