// The task shim's output forwarder (see rank_output.hpp): the program's stdout and stderr, as
// records on the task's own stdout and stderr, which srun or mpirun carry to ringrun.
#include "task/output.hpp"

#include "supervisor/rank_output.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace ringrun {
namespace {

bool write_fully(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// After the program has exited, how long its pipes may stay silent before the forwarder stops
// waiting for their EOF. A child the program left behind (an orphan Slurm's linuxproc sweep missed,
// a daemon) may hold them for ever; the forwarder would then hold the task's stdout, and slurmstepd
// would keep the step, and the job, COMPLETING. Found by the scancel test under load.
constexpr int kOrphanQuietMs = 1000;

// Runs until both pipes are closed by every process that holds them (the program and its
// children), or, once the program itself has exited, until they are quiet for kOrphanQuietMs.
// A line the program left without a newline gets one, as the local backend does.
int forward_records(int program_stdout, int program_stderr, pid_t program, int program_pidfd) {
  struct Pipe {
    int from;
    int to;
    bool at_line_start = true;
  };
  Pipe pipes[2] = {{program_stdout, STDOUT_FILENO}, {program_stderr, STDERR_FILENO}};
  bool program_gone = ::getppid() != program;
  std::vector<char> chunk(1 << 16);
  std::string records;
  for (;;) {
    pollfd fds[3];
    nfds_t count = 0;
    Pipe* polled[2];
    for (Pipe& p : pipes)
      if (p.from >= 0) {
        fds[count] = {p.from, POLLIN, 0};
        polled[count++] = &p;
      }
    if (count == 0) return 0;
    const nfds_t pipe_count = count;
    if (!program_gone && program_pidfd >= 0) fds[count++] = {program_pidfd, POLLIN, 0};
    // Without a pidfd (older kernels) the program's exit shows as the forwarder's new parent.
    int timeout = program_gone ? kOrphanQuietMs : program_pidfd >= 0 ? -1 : kOrphanQuietMs;
    int ready = ::poll(fds, count, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (ready == 0) {
      if (program_gone) return 0;
      program_gone = ::getppid() != program;
      continue;
    }
    if (count > pipe_count && fds[pipe_count].revents) program_gone = true;
    for (nfds_t k = 0; k < pipe_count; ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Pipe& p = *polled[k];
      ssize_t n = ::read(p.from, chunk.data(), chunk.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      records.clear();
      if (n > 0) {
        append_records(records, std::string_view(chunk.data(), static_cast<std::size_t>(n)));
        p.at_line_start = chunk[static_cast<std::size_t>(n) - 1] == '\n';
      } else {
        if (!p.at_line_start) append_records(records, "\n");
        ::close(p.from);
        p.from = -1;
      }
      // The launcher is gone: so is the forwarder, and the program's next write gets SIGPIPE as
      // it would have without a forwarder.
      if (!records.empty() && !write_fully(p.to, records)) return 1;
    }
  }
}

}  // namespace

void start_record_forwarder() {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw LaunchError(fmt::format("ringrun task: pipe for the program's output: {}", std::strerror(errno)), 1);
  const pid_t program = ::getpid();  // it execs the program next: the program's pid
  pid_t pid = ::fork();
  if (pid < 0)
    throw LaunchError(fmt::format("ringrun task: fork of the output forwarder: {}", std::strerror(errno)), 1);
  if (pid == 0) {
    ::close(out[1]);
    ::close(err[1]);
    // srun and mpirun signal every process of a task; the program decides whether to stop, and
    // the forwarder carries its last lines until it has. SIGKILL still ends it.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_IGN);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    // Raw syscall: Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.
    ::_exit(forward_records(out[0], err[0], program, static_cast<int>(::syscall(SYS_pidfd_open, program, 0))));
  }
  if (::dup2(out[1], STDOUT_FILENO) < 0 || ::dup2(err[1], STDERR_FILENO) < 0)
    throw LaunchError(fmt::format("ringrun task: dup2 for the program's output: {}", std::strerror(errno)), 1);
  for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
}

}  // namespace ringrun
