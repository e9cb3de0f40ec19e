// Finding other programs (common/subprocess.hpp).
#include "common/subprocess.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace ringrun
