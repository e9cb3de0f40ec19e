#include <ringrun/supervisor.hpp>
#include <ringrun/topology.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <linux/mempolicy.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

// What a child reports on its status pipe before exiting 127, with errno.
constexpr int kChildExecFailed = 1;
constexpr int kChildAffinityFailed = 2;
constexpr int kChildMemBindFailed = 3;
// NUMA nodes --mem-bind local can name in the local backend (the kernel's MAX_NUMNODES is 1024).
constexpr unsigned kMaxNumaNodes = 1024;

using Clock = std::chrono::steady_clock;

// A line longer than this without a newline is written out in pieces: the alternative is
// unbounded memory for a rank that writes binary data to stdout.
constexpr std::size_t kMaxLine = 4u << 20;

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EPIPE and friends: the reader is gone; keep draining the ranks regardless.
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// --output-filename: DIR/rank.N/{stdout,stderr}, opened when a rank first writes (for srun and
// mpirun the ranks are only known from their tagged lines) or up front for local ranks.
struct RankFiles {
  std::optional<std::filesystem::path> dir;
  std::map<std::pair<int, int>, int> fds;  // (rank, 1|2) -> fd
  bool warned = false;

  int get(int rank, int stream) {
    if (!dir) return -1;
    auto key = std::make_pair(rank, stream);
    if (auto it = fds.find(key); it != fds.end()) return it->second;
    std::filesystem::path d = *dir / fmt::format("rank.{}", rank);
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    int fd = ec ? -1 : ::open((d / (stream == 1 ? "stdout" : "stderr")).c_str(),
                              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && !warned) {
      warned = true;
      std::string line = fmt::format("ringrun: --output-filename: cannot write under '{}': {}\n", d.string(),
                                     ec ? ec.message() : std::strerror(errno));
      write_all(STDERR_FILENO, line.data(), line.size());
    }
    fds[key] = fd;
    return fd;
  }
  ~RankFiles() {
    for (auto& [k, fd] : fds)
      if (fd >= 0) ::close(fd);
  }
};

// The first failing rank as srun or mpirun reports it on its own stderr:
//   srun:   "srun: error: n2: task 3: Exited with exit code 3"
//   mpirun: "mpirun noticed that process rank 0 with PID 4242 on node vm exited on signal 9 (Killed)."
//           "  Process name: [[32149,1],0]" then "  Exit code:    2"
struct ReportedFailure {
  std::optional<int> rank;
  std::string host;
  std::string what;  // "exited with code 3", "was killed by signal 9"
  std::optional<int> pending_rank;  // mpirun's "Process name" line, waiting for its exit code

  static std::optional<int> number(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size() && s[i] == ' ') ++i;
    std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start || i - start > 9) return std::nullopt;
    return std::stoi(std::string(s.substr(start, i - start)));
  }

  void note(std::string_view line, OutputRetag launcher) {
    if (rank) return;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (launcher == OutputRetag::srun_label) {
      constexpr std::string_view prefix = "srun: error: ";
      if (!line.starts_with(prefix)) return;
      line.remove_prefix(prefix.size());
      std::size_t colon = line.find(": task ");
      if (colon == std::string_view::npos) return;
      std::string_view host = line.substr(0, colon);
      std::string_view rest = line.substr(colon + 7);
      auto r = number(rest);
      std::size_t after = rest.find(": ");
      if (!r || after == std::string_view::npos) return;
      std::string_view status = rest.substr(after + 2);
      constexpr std::string_view exited = "Exited with exit code ";
      if (status.starts_with(exited)) what = fmt::format("exited with code {}", status.substr(exited.size()));
      else what = fmt::format("was stopped ({})", status);
      rank = r;
      this->host = std::string(host);
    } else if (launcher == OutputRetag::mpirun_tag) {
      constexpr std::string_view noticed = "mpirun noticed that process rank ";
      if (line.starts_with(noticed)) {
        std::string_view rest = line.substr(noticed.size());
        auto r = number(rest);
        std::size_t node = rest.find(" on node ");
        std::size_t sig = rest.find(" exited on signal ");
        if (!r || node == std::string_view::npos || sig == std::string_view::npos || sig < node) return;
        rank = r;
        host = std::string(rest.substr(node + 9, sig - node - 9));
        auto signal = number(rest.substr(sig + 18));
        what = signal ? fmt::format("was killed by signal {}", *signal) : "was killed by a signal";
        return;
      }
      std::size_t name = line.find("Process name: [[");  // [[jobid,vpid],rank]
      if (name != std::string_view::npos) {
        std::size_t job_end = line.find("],", name);
        if (job_end != std::string_view::npos) pending_rank = number(line.substr(job_end + 2));
        return;
      }
      std::size_t code = line.find("Exit code:");
      if (code != std::string_view::npos && pending_rank) {
        auto c = number(line.substr(code + 10));
        if (!c) return;
        rank = pending_rank;
        what = fmt::format("exited with code {}", *c);
      }
    }
  }
};

// One stream of one process: a pipe we read, split into whole lines, each written with one
// write() so lines from different ranks never interleave.
struct Stream {
  int fd = -1;
  int out_fd = -1;     // ringrun's stdout (1) or stderr (2)
  int rank = 0;        // the rank, for OutputRetag::none
  std::string label;   // "[3]" or "[srun]"
  OutputRetag retag = OutputRetag::none;
  bool tag = true;
  RankFiles* files = nullptr;
  ReportedFailure* reported = nullptr;  // srun/mpirun's own lines name the failing rank
  std::string buffer;

  // Splits a launcher's tagged line into (rank, content); false when it carries no rank tag.
  bool parse_tag(std::string_view line, int& rank_out, std::string_view& content) const {
    std::size_t i = 0;
    if (retag == OutputRetag::srun_label) {
      while (i < line.size() && line[i] == ' ') ++i;
      std::size_t d = i;
      while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
      if (i == d || i + 1 >= line.size() + 1 || line.substr(i, 2) != ": ") return false;
      rank_out = std::stoi(std::string(line.substr(d, i - d)));
      content = line.substr(i + 2);
      return true;
    }
    if (retag == OutputRetag::mpirun_tag) {
      if (line.empty() || line[0] != '[') return false;
      std::size_t comma = line.find(',');
      std::size_t close = line.find(']');
      if (comma == std::string_view::npos || close == std::string_view::npos || comma > close) return false;
      std::string_view digits = line.substr(comma + 1, close - comma - 1);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
      rank_out = std::stoi(std::string(digits));
      content = line.substr(close + 1);
      for (std::string_view s : {"<stdout>:", "<stderr>:"})
        if (content.starts_with(s)) content.remove_prefix(s.size());
      return true;
    }
    return false;
  }

  void emit_line(std::string& out, std::string_view line /* with its newline */) {
    const char* name = out_fd == STDOUT_FILENO ? "<stdout>:" : "<stderr>:";
    int r = rank;
    std::string_view content = line;
    bool tagged = retag == OutputRetag::none;
    if (!tagged && parse_tag(line, r, content)) tagged = true;
    if (!tagged && reported) reported->note(line, retag);
    if (tag) {
      if (tagged && retag != OutputRetag::none) out += fmt::format("[{}]", r);
      else out += label;
      out += name;
    }
    out.append(content);
    if (files && tagged) {
      int f = files->get(r, out_fd);
      if (f >= 0) write_all(f, content.data(), content.size());
    }
  }

  void emit(bool at_eof) {
    std::string out;
    std::size_t start = 0;
    for (;;) {
      std::size_t nl = buffer.find('\n', start);
      if (nl == std::string::npos) break;
      emit_line(out, std::string_view(buffer).substr(start, nl + 1 - start));
      start = nl + 1;
    }
    if ((at_eof && start < buffer.size()) || buffer.size() - start > kMaxLine) {
      std::string last = buffer.substr(start) + "\n";
      emit_line(out, last);
      start = buffer.size();
    }
    if (!out.empty()) write_all(out_fd, out.data(), out.size());
    buffer.erase(0, start);
  }
};

struct Child {
  const ProcessSpec* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return fmt::format("was killed by signal {} (SIG{})", sig, name ? name : "?");
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

int exit_code_of(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::vector<char*> c_strings(const std::vector<std::string>& items) {
  std::vector<char*> out;
  out.reserve(items.size() + 1);
  for (const auto& s : items) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The guard: a small process that outlives ringrun by design. It reads the process-group ids of
// the ranks from a pipe; when the pipe closes without the "all done" word (ringrun was SIGKILLed
// or crashed), it SIGKILLs every group, so no rank, nor anything a rank started, survives.
struct Guard {
  int write_fd = -1;
  pid_t pid = -1;

  void start() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(fmt::format("ringrun: pipe: {}", std::strerror(errno)), 1);
    pid = ::fork();
    if (pid < 0) throw LaunchError(fmt::format("ringrun: fork: {}", std::strerror(errno)), 1);
    if (pid == 0) {
      ::close(fds[1]);
      ::setsid();  // out of the terminal's process group: Ctrl-C is ringrun's to handle
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGINT, SIG_IGN);
      ::signal(SIGTERM, SIG_IGN);
      ::signal(SIGHUP, SIG_IGN);
      std::vector<pid_t> groups;
      for (;;) {
        pid_t group = 0;
        ssize_t n = ::read(fds[0], &group, sizeof group);
        if (n < 0 && errno == EINTR) continue;
        if (n != static_cast<ssize_t>(sizeof group)) break;
        if (group == 0) ::_exit(0);  // ringrun finished and cleaned up itself
        groups.push_back(group);
      }
      for (pid_t g : groups) ::kill(-g, SIGKILL);
      ::_exit(0);
    }
    ::close(fds[0]);
    write_fd = fds[1];
  }
  void watch(pid_t group) const {
    if (write_fd >= 0) write_all(write_fd, reinterpret_cast<const char*>(&group), sizeof group);
  }
  void release() {
    if (write_fd < 0) return;
    pid_t done = 0;
    write_all(write_fd, reinterpret_cast<const char*>(&done), sizeof done);
    ::close(write_fd);
    write_fd = -1;
  }
};

sigset_t supervisor_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  return set;
}

// The mask the process started with: children get it back before exec.
sigset_t g_original_mask;
bool g_signals_blocked = false;

}  // namespace

void block_supervisor_signals() {
  sigset_t set = supervisor_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, &g_original_mask);
  g_signals_blocked = true;
}

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
  if (g_signals_blocked) previous = g_original_mask;
  int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) throw LaunchError(fmt::format("ringrun: signalfd: {}", std::strerror(errno)), 1);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old_pipe {};
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  Guard guard;
  guard.start();

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
    int out[2], err[2], exec_status[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(exec_status, O_CLOEXEC) != 0)
      throw LaunchError(fmt::format("ringrun: pipe: {}", std::strerror(errno)), 1);
    // Everything the child needs is built before fork: the store's thread may hold malloc's lock.
    std::vector<char*> argv = c_strings(spec.argv);
    std::vector<char*> envp = c_strings(spec.env);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (unsigned c : spec.cpus)
      if (c < CPU_SETSIZE) CPU_SET(c, &cpus);
    // --mem-bind local: the plan names the rank's NUMA nodes in RINGRUN_MEM_BIND_NODES; the mask
    // for set_mempolicy is built here, the child only makes the system call.
    std::array<unsigned long, kMaxNumaNodes / (8 * sizeof(unsigned long))> numa_mask{};
    bool mem_bind = false;
    for (const std::string& entry : spec.env) {
      static constexpr std::string_view kNodes = "RINGRUN_MEM_BIND_NODES=";
      if (entry.compare(0, kNodes.size(), kNodes) != 0) continue;
      std::vector<unsigned> nodes;
      try {
        nodes = topology::parse_cpulist(entry.substr(kNodes.size()));
      } catch (const std::invalid_argument& e) {
        throw LaunchError(fmt::format("ringrun: rank {}: {}", spec.rank, e.what()), 2);
      }
      for (unsigned node : nodes) {
        if (node >= kMaxNumaNodes)
          throw LaunchError(fmt::format("ringrun: rank {}: NUMA node {} is beyond the {} this build binds to; run "
                                        "with --mem-bind none",
                                        spec.rank, node, kMaxNumaNodes),
                            2);
        numa_mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
        mem_bind = true;
      }
    }
    int in_fd = (spec.stdin_inherit && !stdin_is_tty) ? STDIN_FILENO : devnull;

    pid_t pid = ::fork();
    if (pid < 0) {
      int e = errno;
      stop_all(SIGKILL);
      throw LaunchError(fmt::format("ringrun: fork for rank {}: {}", spec.rank, std::strerror(e)), 1);
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // ringrun died between fork and prctl
      ::dup2(in_fd, STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::signal(SIGPIPE, SIG_DFL);
      ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      if (!spec.cpus.empty() && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
        const int status[2] = {kChildAffinityFailed, errno};
        (void)!::write(exec_status[1], status, sizeof status);
        ::_exit(127);
      }
      // maxnode counts bits, plus one: the kernel drops the last bit (set_mempolicy(2), BUGS).
      if (mem_bind && ::syscall(SYS_set_mempolicy, MPOL_BIND, numa_mask.data(), kMaxNumaNodes + 1) != 0) {
        const int status[2] = {kChildMemBindFailed, errno};
        (void)!::write(exec_status[1], status, sizeof status);
        ::_exit(127);
      }
      ::execve(spec.executable.c_str(), argv.data(), envp.data());
      const int status[2] = {kChildExecFailed, errno};
      (void)!::write(exec_status[1], status, sizeof status);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
    guard.watch(pid);
    ::close(out[1]);
    ::close(err[1]);
    ::close(exec_status[1]);
    children[i] = Child{&spec, pid, true, 0};
    int child_status[2] = {0, 0};  // what failed in the child, errno
    ssize_t got;
    do got = ::read(exec_status[0], child_status, sizeof child_status);
    while (got < 0 && errno == EINTR);
    ::close(exec_status[0]);
    if (got == static_cast<ssize_t>(sizeof child_status)) {
      // exec failed after resolve_program said it would work (e.g. a bad interpreter line), or
      // binding did.
      stop_all(SIGKILL);
      for (auto& c : children)
        if (c.running) ::waitpid(c.pid, nullptr, 0);
      guard.release();
      const char* error = std::strerror(child_status[1]);
      if (child_status[0] == kChildAffinityFailed)
        throw LaunchError(fmt::format("ringrun: rank {}: cannot bind to cpus {}: {}; run with --bind none to skip "
                                      "binding",
                                      spec.rank, topology::format_cpulist(spec.cpus), error),
                          1);
      if (child_status[0] == kChildMemBindFailed)
        throw LaunchError(fmt::format("ringrun: rank {}: cannot bind memory to its NUMA node(s) (set_mempolicy "
                                      "MPOL_BIND): {}; run with --mem-bind none",
                                      spec.rank, error),
                          1);
      throw LaunchError(fmt::format("ringrun: cannot execute '{}' for rank {}: {}", spec.argv[0], spec.rank, error),
                        127);
    }
    std::string label = spec.label == "rank" ? fmt::format("[{}]", spec.rank) : fmt::format("[{}]", spec.label);
    RankFiles* rank_files = options.output_directory ? &files : nullptr;
    streams.push_back(Stream{out[0], STDOUT_FILENO, spec.rank, label, spec.retag, options.tag_output, rank_files,
                             nullptr, {}});
    streams.push_back(Stream{err[0], STDERR_FILENO, spec.rank, label, spec.retag, options.tag_output, rank_files,
                             spec.retag != OutputRetag::none ? &reported : nullptr, {}});
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
          s.emit(true);
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
        s.buffer.append(chunk.data(), static_cast<std::size_t>(n));
        s.emit(false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        s.emit(true);
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
  if (guard.pid > 0) ::waitpid(guard.pid, nullptr, 0);
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
      return exit_code_of(c.status);
    }
    std::string line =
        c.spec->label == "rank"
            ? fmt::format("ringrun: rank {} (host {}) {}; stopped {}\n", c.spec->rank, c.spec->host,
                          describe_status(c.status), others)
            // srun/mpirun stopped the other ranks themselves and named the failing one above.
            : fmt::format("ringrun: {} {}; the failing rank is named in its output above\n", c.spec->label,
                          describe_status(c.status));
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
