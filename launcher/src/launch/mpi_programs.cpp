#include "launch/mpi_programs.hpp"

#include "common/subprocess.hpp"
#include "facts/mpi_program.hpp"
#include "facts/pod_job.hpp"

#include <ringrun/allocation.hpp>

#include <fmt/format.h>

#include <netdb.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ringrun {
namespace {

constexpr const char* kSessionBaseVariable = "OMPI_MCA_orte_tmpdir_base";

// A ringrun killed by SIGKILL leaves its watch directory behind; the next one removes those whose
// ringrun (the pid in the name) is gone.
void remove_stale_watch_directories(const std::string& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("ringrun-mpi.")) continue;
    const long pid = std::strtol(name.c_str() + 12, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

LauncherKind launcher_for_mpi_program(LauncherKind resolved, const std::vector<std::string>& program,
                                      const Environment& env, std::vector<std::string>& notes,
                                      std::vector<std::string>& warnings) {
  if (resolved != LauncherKind::local || program.empty()) return resolved;
  const std::optional<std::string> reason = detect_mpi_program(program, search_path(env));
  if (!reason) return resolved;
  try {
    resolve_program("mpirun", search_path(env));
  } catch (const std::exception&) {
    warnings.push_back(fmt::format("ringrun: warning: '{}' {} (an MPI program) but mpirun is not in PATH: each rank "
                                   "will be an MPI world of 1; install Open MPI's mpirun, or give --launcher local "
                                   "to start it so on purpose",
                                   program.front(), *reason));
    return resolved;
  }
  notes.push_back(fmt::format("ringrun: launcher mpirun: '{}' {} (an MPI program); mpirun makes its ranks one MPI "
                              "world (--launcher local would start each as an MPI world of 1)",
                              program.front(), *reason));
  return LauncherKind::mpirun;
}

std::unique_ptr<SingletonWatch> SingletonWatch::start(const std::vector<ProcessSpec>& processes,
                                                      const Environment& env) {
  if (processes.empty() || env.count(kSessionBaseVariable)) return nullptr;
  for (const ProcessSpec& p : processes)
    for (const std::string& kv : p.env)
      if (kv.starts_with(std::string(kSessionBaseVariable) + "=")) return nullptr;  // -x gave it
  // A rank that is itself a launcher (`ringrun -np 1 mpirun ...`) makes a real MPI world.
  const std::string name = basename_of(processes.front().executable);
  if (name == "mpirun" || name == "mpiexec" || name == "orterun" || name == "prterun") return nullptr;
  // On tmpfs where there is one: on ext4 the rmdir alone cost a launch 0.4 ms (journaled).
  auto tmp = env.find("TMPDIR");
  const std::string tmp_dir = ::access("/dev/shm", W_OK | X_OK) == 0             ? "/dev/shm"
                              : tmp != env.end() && !tmp->second.empty() ? tmp->second
                                                                         : "/tmp";
  remove_stale_watch_directories(tmp_dir);
  std::string pattern = fmt::format("{}/ringrun-mpi.{}.XXXXXX", tmp_dir, ::getpid());
  if (!::mkdtemp(pattern.data())) return nullptr;
  // Any entry made or removed in it sets its modification time to now.
  const timespec epoch[2] = {{0, 0}, {0, 0}};
  if (::utimensat(AT_FDCWD, pattern.c_str(), epoch, 0) != 0) {
    ::rmdir(pattern.c_str());
    return nullptr;
  }
  return std::unique_ptr<SingletonWatch>(new SingletonWatch(pattern));
}

SingletonWatch::~SingletonWatch() {
  std::error_code ec;
  std::filesystem::remove_all(directory_, ec);  // what a killed rank's Open MPI left behind
}

void SingletonWatch::apply(std::vector<ProcessSpec>& processes) const {
  for (ProcessSpec& p : processes) p.env.push_back(std::string(kSessionBaseVariable) + "=" + directory_);
}

bool SingletonWatch::mpi_initialized() const {
  struct stat st {};
  return ::stat(directory_.c_str(), &st) == 0 && (st.st_mtim.tv_sec != 0 || st.st_mtim.tv_nsec != 0);
}

std::vector<std::string> ssh_config_host_names(std::string_view config) {
  std::vector<std::string> names;
  std::istringstream lines{std::string(config)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string keyword;
    words >> keyword;
    for (char& c : keyword) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (keyword != "host") continue;
    for (std::string name; words >> name;)
      if (name.find_first_of("*?!") == std::string::npos) names.push_back(name);
  }
  return names;
}

void require_resolvable_hosts(const std::vector<std::string>& remote_hosts, const std::string& flag,
                              const Environment& env) {
  std::vector<std::string> aliases;
  if (auto home = env.find("HOME"); home != env.end()) {
    std::ifstream in(home->second + "/.ssh/config");
    std::stringstream text;
    text << in.rdbuf();
    aliases = ssh_config_host_names(text.str());
  }
  std::vector<std::string> bad;
  for (const std::string& host : remote_hosts) {
    if (std::find(bad.begin(), bad.end(), host) != bad.end()) continue;
    if (std::find(aliases.begin(), aliases.end(), host) == aliases.end() && !host_resolves(host)) bad.push_back(host);
  }
  if (bad.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < bad.size(); ++i) list += fmt::format("{}'{}'", i ? ", " : "", bad[i]);
  throw InputError(fmt::format("{} : host{} {} do{} not resolve; fix the name{}, or add {} to /etc/hosts or "
                               "~/.ssh/config",
                               flag, bad.size() > 1 ? "s" : "", list, bad.size() > 1 ? "" : "es",
                               bad.size() > 1 ? "s" : "", bad.size() > 1 ? "them" : "it"));
}

}  // namespace ringrun
