#include "supervisor_output.hpp"
#include "supervisor_parts.hpp"

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

#include <array>
#include <filesystem>
#include <map>
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

}  // namespace

std::string resolve_program(const std::string& program, const std::string& path) {
  if (program.empty()) throw LaunchError("ringrun: the program name is empty", 2);
  auto check = [&](const std::string& candidate) -> int {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(candidate.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (program.find('/') != std::string::npos) {
    int err = check(program);
    if (err == 0) return program;
    throw LaunchError(fmt::format("ringrun: cannot execute '{}': {}", program, std::strerror(err)), 127);
  }
  int first_error = ENOENT;
  std::size_t start = 0;
  for (;;) {
    std::size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    int err = check(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && err != ENOTDIR && first_error == ENOENT) first_error = err;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (first_error != ENOENT)
    throw LaunchError(fmt::format("ringrun: cannot execute '{}': {}", program, std::strerror(first_error)), 127);
  throw LaunchError(fmt::format("ringrun: program '{}' not found in PATH; give its path (e.g. ./{}) or fix PATH",
                                program, program), 127);
}

int supervise(const std::vector<ProcessSpec>& processes, const SupervisorOptions& options) {
  // Output files first: a directory we cannot write is a usage error, and nothing has started.
  RankFiles files;
  if (options.output_directory) {
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

  // Signals arrive through a signalfd, so the loop below is the only place that reacts to them.
  sigset_t handled = supervisor_signals(), previous;
  ::pthread_sigmask(SIG_BLOCK, &handled, &previous);
  previous = exec_signal_mask(previous);
  int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) throw LaunchError(fmt::format("ringrun: signalfd: {}", std::strerror(errno)), 1);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old_pipe {};
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  RankGuard guard(processes.size());

  const bool stdin_is_tty = ::isatty(STDIN_FILENO);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();

  std::vector<Child> children(processes.size());
  std::vector<Stream> streams;
  ReportedFailure reported;
  streams.reserve(processes.size() * 2);
  auto stop_all = [&](int sig) {
    int n = 0;
    for (auto& c : children)
      if (c.running) {
        ::kill(-c.pid, sig);
        ++n;
      }
    return n;
  };

  for (std::size_t i = 0; i < processes.size(); ++i) {
    const ProcessSpec& spec = processes[i];
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw LaunchError(fmt::format("ringrun: pipe: {}", std::strerror(errno)), 1);
    RankLaunch launch = rank_launch(spec, previous, parent);
    launch.in_fd = (spec.stdin_inherit && !stdin_is_tty) ? STDIN_FILENO : devnull;
    launch.out_fd = out[1];
    launch.err_fd = err[1];
    SpawnFailure failure;
    const pid_t pid = spawn_rank(launch, failure);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      const int e = errno;
      stop_all(SIGKILL);
      for (auto& c : children)
        if (c.running) ::waitpid(c.pid, nullptr, 0);
      guard.release();
      throw LaunchError(fmt::format("ringrun: starting rank {}: {}", spec.rank, std::strerror(e)), 1);
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
    guard.watch(pid);
    children[i] = Child{&spec, pid, true, 0};
    if (failure.step != SpawnFailure::none) {
      // exec failed after resolve_program said it would work (e.g. a bad interpreter line), or
      // binding did.
      stop_all(SIGKILL);
      for (auto& c : children)
        if (c.running) ::waitpid(c.pid, nullptr, 0);
      guard.release();
      throw spawn_error(spec, failure);
    }
    std::string label = spec.label == "rank" ? fmt::format("[{}]", spec.rank) : fmt::format("[{}]", spec.label);
    RankFiles* rank_files = options.output_directory ? &files : nullptr;
    streams.emplace_back(out[0], STDOUT_FILENO, spec.rank, label, spec.retag, options.tag_output, rank_files,
                         nullptr);
    streams.emplace_back(err[0], STDERR_FILENO, spec.rank, label, spec.retag, options.tag_output, rank_files,
                         spec.retag != OutputRetag::none ? &reported : nullptr);
  }
  if (devnull >= 0) ::close(devnull);

  std::size_t running = processes.size();
  std::optional<std::size_t> first_failure;
  int stopped_others = 0;
  int interrupted_by = 0;
  int stopped_on_signal = 0;
  std::optional<Clock::time_point> kill_at;      // SIGKILL the rest at this time
  std::optional<Clock::time_point> drain_until;  // all exited; wait this long for pipes to close
  std::vector<char> chunk(1 << 16);

  auto begin_stop = [&](int sig) {
    int n = stop_all(sig);
    if (!kill_at) kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(options.grace_period_s));
    return n;
  };

  for (;;) {
    std::size_t open_streams = 0;
    for (auto& s : streams)
      if (s.fd >= 0) ++open_streams;
    if (running == 0 && open_streams == 0) break;
    if (running == 0 && !drain_until) drain_until = Clock::now() + std::chrono::seconds(2);

    std::vector<pollfd> fds;
    fds.push_back({sfd, POLLIN, 0});
    std::vector<std::size_t> stream_of;
    for (std::size_t i = 0; i < streams.size(); ++i)
      if (streams[i].fd >= 0) {
        fds.push_back({streams[i].fd, POLLIN, 0});
        stream_of.push_back(i);
      }
    int timeout_ms = -1;
    auto now = Clock::now();
    for (auto deadline : {kill_at, drain_until})
      if (deadline) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now).count();
        ms = std::max<long long>(ms + 1, 0);
        timeout_ms = timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
      }
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) break;

    now = Clock::now();
    if (kill_at && now >= *kill_at) {
      stop_all(SIGKILL);
      kill_at.reset();
    }
    if (drain_until && now >= *drain_until) {
      // Every rank has exited but something they started still holds the pipes: end it.
      for (auto& c : children) ::kill(-c.pid, SIGKILL);
      for (auto& s : streams)
        if (s.fd >= 0) {
          s.feed({}, true);
          ::close(s.fd);
          s.fd = -1;
        }
      continue;
    }
    if (ready <= 0) continue;

    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = streams[stream_of[k - 1]];
      ssize_t n = ::read(s.fd, chunk.data(), chunk.size());
      if (n > 0) {
        s.feed(std::string_view(chunk.data(), static_cast<std::size_t>(n)), false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        s.feed({}, true);
        ::close(s.fd);
        s.fd = -1;
      }
    }

    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (sig == SIGUSR1 || sig == SIGUSR2) {
          // Slurm's --signal=B:USR1@T asks for a checkpoint: pass it on, the job goes on.
          for (auto& c : children)
            if (c.running) ::kill(-c.pid, sig);
          continue;
        }
        if (interrupted_by || first_failure) {
          stop_all(SIGKILL);  // a second signal: the user does not want to wait for the grace period
        } else {
          interrupted_by = sig;
          stopped_on_signal = begin_stop(sig);
        }
      }
      for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        for (std::size_t i = 0; i < children.size(); ++i) {
          Child& c = children[i];
          if (c.pid != pid || !c.running) continue;
          c.running = false;
          c.status = status;
          --running;
          bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
          if (failed && !first_failure && !interrupted_by) {
            first_failure = i;
            stopped_others = begin_stop(SIGTERM);
          }
        }
      }
    }
  }

  // Whatever a rank left behind in its process group goes with it.
  for (auto& c : children) ::kill(-c.pid, SIGKILL);
  guard.release();
  ::close(sfd);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);

  if (first_failure) {
    const Child& c = children[*first_failure];
    std::string others = stopped_others == 1 ? "1 other rank" : fmt::format("{} other ranks", stopped_others);
    if (c.spec->label != "rank" && reported.rank) {
      // srun/mpirun named the rank; they stopped the others themselves (--kill-on-bad-exit).
      int r = *reported.rank;
      const auto& hosts = c.spec->rank_hosts;
      std::string host = !reported.host.empty() ? reported.host
                         : (r >= 0 && static_cast<std::size_t>(r) < hosts.size()) ? hosts[static_cast<std::size_t>(r)]
                                                                                   : "?";
      int others = hosts.empty() ? 0 : static_cast<int>(hosts.size()) - 1;
      std::string line = fmt::format("ringrun: rank {} (host {}) {}; stopped {} other rank{}\n", r, host, reported.what,
                                     others, others == 1 ? "" : "s");
      write_all(STDERR_FILENO, line.data(), line.size());
      // The failing rank's own status, as the local backend returns it (not srun's worst task).
      return reported.exit_status.value_or(exit_code_of(c.status));
    }
    std::string line =
        c.spec->label == "rank"
            ? fmt::format("ringrun: rank {} (host {}) {}; stopped {}\n", c.spec->rank, c.spec->host,
                          describe_status(c.status), others)
            // srun/mpirun stopped the other ranks themselves but named no rank: mpirun 4.1 under
            // load sometimes prints only "1 process returned a non-zero exit code" (its exit
            // status is then the first failure's).
            : fmt::format("ringrun: {} {} without naming the failing rank; stopped the others\n",
                          c.spec->label, describe_status(c.status));
    write_all(STDERR_FILENO, line.data(), line.size());
    return exit_code_of(c.status);
  }
  if (interrupted_by) {
    const char* name = sigabbrev_np(interrupted_by);
    std::string line = fmt::format("ringrun: received SIG{}; stopped {} rank{}\n", name ? name : "?",
                                   stopped_on_signal, stopped_on_signal == 1 ? "" : "s");
    write_all(STDERR_FILENO, line.data(), line.size());
    return 128 + interrupted_by;
  }
  return 0;
}

}  // namespace ringrun
