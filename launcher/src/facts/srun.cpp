#include "facts/srun.hpp"

#include "facts/cache.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

namespace ringrun {
namespace {

constexpr int kScontrolTimeoutS = 10;

std::string value_of(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

std::string find_in_path(const Environment& env, const char* program) {
  std::string path = env.count("PATH") ? env.at("PATH") : "/usr/bin:/bin";
  std::stringstream ss(path);
  for (std::string dir; std::getline(ss, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

bool plugin_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// A TaskPlugin value: plugin types separated by commas ("task/affinity,task/cgroup").
bool task_plugin_value(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '/' ||
          c == ',' || c == '-'))
      return false;
  return true;
}

// The lines of one fact about this cluster (`fact` names it in the key, `file` in the file
// name): the cached copy when every line passes `valid`, else ask(), stored when non-empty.
std::vector<std::string> cached_lines(const Environment& env, const std::string& fact, const std::string& file,
                                      bool (*valid)(const std::string&),
                                      const std::function<std::vector<std::string>()>& ask) {
  auto srun_id = file_identity(find_in_path(env, "srun"));
  if (!srun_id) return ask();
  const std::string conf = value_of(env, "SLURM_CONF");
  // The facts come from slurm.conf and srun's build: a new srun or an edited configuration is
  // another key.
  const std::string key = fmt::format("ringrun {} v1\ncluster {}\nconf {}\nsrun {}", fact,
                                      value_of(env, "SLURM_CLUSTER_NAME"), file_identity(conf).value_or(conf), *srun_id);
  return cached_fact_lines(key, file, valid, ask);
}

// The stdout of `exe args...` run with env (no shell; stdin and stderr on /dev/null, so a
// failing scontrol adds no line to the job's output); nullopt when it fails or outlasts timeout_s.
std::optional<std::string> capture_stdout(const std::string& exe, const std::vector<std::string>& args,
                                          const Environment& env, int timeout_s) {
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv{const_cast<char*>(exe.c_str())}, cenv;
  for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(devnull, STDERR_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execve(exe.c_str(), cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      break;
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

std::string ask_task_plugin(const Environment& env) {
  const std::string conf = value_of(env, "SLURM_CONF");
  if (::access(conf.empty() ? "/etc/slurm/slurm.conf" : conf.c_str(), R_OK) != 0) return {};
  const std::string scontrol = find_in_path(env, "scontrol");
  if (scontrol.empty()) return {};
  auto out = capture_stdout(scontrol, {"show", "config"}, env, kScontrolTimeoutS);
  return out ? parse_task_plugin(*out) : std::string();
}

}  // namespace

std::vector<std::string> cached_srun_mpi_plugins(const Environment& env,
                                                 const std::function<std::vector<std::string>()>& ask) {
  return cached_lines(env, "srun --mpi=list", "srun-mpi-list", plugin_name, ask);
}

std::string cached_slurm_task_plugin(const Environment& env) {
  auto lines = cached_lines(env, "scontrol TaskPlugin", "slurm-task-plugin", task_plugin_value, [&env] {
    std::string plugin = ask_task_plugin(env);
    return plugin.empty() ? std::vector<std::string>{} : std::vector<std::string>{plugin};
  });
  return lines.size() == 1 && task_plugin_value(lines.front()) ? lines.front() : std::string();
}

std::string parse_task_plugin(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r";
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == text.npos ? std::string_view() : text.substr(end + 1);
    const auto eq = line.find('=');
    if (eq == line.npos) continue;
    std::string_view name = line.substr(0, eq), value = line.substr(eq + 1);
    name = name.substr(0, name.find_last_not_of(kSpace) + 1);
    if (name != "TaskPlugin") continue;  // not TaskPluginParam
    const auto first = value.find_first_not_of(kSpace);
    if (first == value.npos) return {};
    value = value.substr(first);
    return std::string(value.substr(0, value.find_last_not_of(kSpace) + 1));
  }
  return {};
}

bool srun_offers_cpu_bind(const std::string& task_plugin) { return task_plugin != "task/none"; }

}  // namespace ringrun
