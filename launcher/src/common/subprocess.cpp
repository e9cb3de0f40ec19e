// Finding and running other programs (common/subprocess.hpp).
#include "common/subprocess.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace ringrun {

std::string search_path(const Environment& env) {
  auto it = env.find("PATH");
  return it != env.end() ? it->second : kDefaultPath;
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

std::optional<std::string> find_in_path(const std::string& program, const std::string& path) {
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string candidate = (end > start ? path.substr(start, end - start) : ".") + "/" + program;
    struct stat st {};
    if (::access(candidate.c_str(), X_OK) == 0 && ::stat(candidate.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

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

std::optional<int> ProgramResult::exit_code() const {
  if (timed_out || !WIFEXITED(wait_status)) return std::nullopt;
  return WEXITSTATUS(wait_status);
}

namespace {

// Strings and the null-terminated array of pointers into them that exec wants (argv, envp).
struct CStrings {
  std::vector<std::string> owned;
  std::vector<char*> pointers;

  explicit CStrings(std::vector<std::string> strings) : owned(std::move(strings)) {
    for (auto& s : owned) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  CStrings(const CStrings&) = delete;
  CStrings& operator=(const CStrings&) = delete;
};

std::vector<std::string> environment_strings(const Environment& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

// Reads `fd` to its end or to `deadline`, whichever comes first; true when the deadline came.
bool read_until(int fd, std::chrono::steady_clock::time_point deadline, std::string& out) {
  char buffer[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready <= 0) continue;  // interrupted, or the deadline (checked above)
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::optional<StartedProgram> start_program(const ProgramCall& call, int* error) {
  auto fail = [error](int code) -> std::optional<StartedProgram> {
    if (error) *error = code;
    return std::nullopt;
  };
  if (call.executable.empty() || call.argv.empty()) return fail(EINVAL);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (call.error_output == ErrorOutput::captured) posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  if (call.error_output == ErrorOutput::discarded)
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGDEF;
  if (call.signal_mask) {
    posix_spawnattr_setsigmask(&attr, call.signal_mask);
    flags |= POSIX_SPAWN_SETSIGMASK;
  }
  if (call.own_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  CStrings argv(call.argv);
  std::optional<CStrings> env;
  if (call.env) env.emplace(environment_strings(*call.env));
  pid_t pid = -1;
  const int spawn_error = ::posix_spawn(&pid, call.executable.c_str(), &actions, &attr, argv.pointers.data(),
                                        env ? env->pointers.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (spawn_error != 0) {
    ::close(fds[0]);
    return fail(spawn_error);
  }
  return StartedProgram{pid, fds[0]};
}

std::optional<ProgramResult> run_program(const ProgramCall& call) {
  const auto started = start_program(call);
  if (!started) return std::nullopt;
  ProgramResult result;
  result.timed_out = read_until(started->output_fd, std::chrono::steady_clock::now() + call.timeout, result.output);
  ::close(started->output_fd);
  if (result.timed_out) ::kill(call.own_group ? -started->pid : started->pid, SIGKILL);
  while (::waitpid(started->pid, &result.wait_status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

}  // namespace ringrun
