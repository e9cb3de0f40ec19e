// The supervisors' shared parts (supervisor/parts.hpp).
#include "supervisor/parts.hpp"

#include <ringrun/environment_variables.hpp>
#include <ringrun/topology.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string_view>
#include <vector>

namespace ringrun {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& items) {
  std::vector<char*> out;
  out.reserve(items.size() + 1);
  for (const auto& s : items) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The mask the process started with: children get it back before exec.
sigset_t g_original_mask;
bool g_signals_blocked = false;

}  // namespace

StartedRank start_rank(const ProcessSpec& spec, const RankStart& start, RankGuard& guard) {
  StartedRank started;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw LaunchError(fmt::format("ringrun: pipe: {}", std::strerror(errno)), 1);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw LaunchError(fmt::format("ringrun: pipe: {}", std::strerror(saved)), 1);
  }
  RankLaunch launch = rank_launch(spec, start.exec_mask, start.parent);
  launch.in_fd = (spec.stdin_inherit && !start.stdin_is_tty) ? STDIN_FILENO : start.devnull;
  launch.out_fd = out[1];
  launch.err_fd = err[1];
  launch.guard_slot = guard.reserve();
  started.pid = spawn_rank(launch, started.failure);
  started.spawn_errno = errno;
  ::close(out[1]);
  ::close(err[1]);
  if (started.pid < 0) guard.cancel(launch.guard_slot);
  if (started.pid > 0) ::setpgid(started.pid, started.pid);  // also here, so the group exists before we might signal it
  if (!started.ok()) {
    ::close(out[0]);
    ::close(err[0]);
    return started;
  }
  started.out_fd = out[0];
  started.err_fd = err[0];
  return started;
}

RankLaunch rank_launch(const ProcessSpec& spec, const sigset_t& exec_mask, pid_t parent) {
  RankLaunch launch;
  launch.executable = spec.executable;
  launch.argv = c_strings(spec.argv);
  launch.envp = c_strings(spec.env);
  launch.exec_mask = exec_mask;
  launch.parent = parent;
  CPU_ZERO(&launch.cpus);
  for (unsigned c : spec.cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &launch.cpus);
  launch.bind_cpus = !spec.cpus.empty();
  constexpr unsigned kBitsPerWord = 8 * sizeof(unsigned long);
  for (const std::string& entry : spec.env) {
    static constexpr std::string_view kNodes = variables::kMemBindNodes.name;
    if (!entry.starts_with(kNodes) || entry.size() == kNodes.size() || entry[kNodes.size()] != '=') continue;
    std::vector<unsigned> nodes;
    try {
      nodes = topology::parse_cpulist(entry.substr(kNodes.size() + 1));
    } catch (const std::invalid_argument& e) {
      throw LaunchError(fmt::format("ringrun: rank {}: {}", spec.rank, e.what()), 2);
    }
    for (unsigned node : nodes) {
      if (node >= kMaxNumaNodes)
        throw LaunchError(fmt::format("ringrun: rank {}: NUMA node {} is beyond the {} this build binds to; run "
                                      "with --mem-bind none",
                                      spec.rank, node, kMaxNumaNodes),
                          2);
      launch.numa_mask[node / kBitsPerWord] |= 1UL << (node % kBitsPerWord);
      launch.bind_memory = true;
    }
  }
  return launch;
}

LaunchError spawn_error(const ProcessSpec& spec, const SpawnFailure& failure) {
  const char* error = std::strerror(failure.error);
  switch (failure.step) {
    case SpawnFailure::affinity:
      return LaunchError(fmt::format("ringrun: rank {}: cannot bind to cpus {}: {}; run with --bind none to skip "
                                     "binding",
                                     spec.rank, topology::format_cpulist(spec.cpus), error),
                         1);
    case SpawnFailure::memory_binding:
      return LaunchError(fmt::format("ringrun: rank {}: cannot bind memory to its NUMA node(s) (set_mempolicy "
                                     "MPOL_BIND): {}; run with --mem-bind none",
                                     spec.rank, error),
                         1);
    default:
      return LaunchError(fmt::format("ringrun: cannot execute '{}' for rank {}: {}", spec.argv[0], spec.rank, error),
                         127);
  }
}

sigset_t supervisor_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  return set;
}

int stop_signal_before(std::chrono::steady_clock::time_point until) {
  const sigset_t signals = supervisor_signals();
  for (;;) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return 0;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec wait{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    const int sig = ::sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return sig;
  }
}

sigset_t exec_signal_mask(const sigset_t& current) { return g_signals_blocked ? g_original_mask : current; }

SignalRoute::SignalRoute() {
  sigset_t handled = supervisor_signals(), previous;
  ::pthread_sigmask(SIG_BLOCK, &handled, &previous);
  exec_mask_ = exec_signal_mask(previous);
  fd_ = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) {
    const int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &exec_mask_, nullptr);
    throw LaunchError(fmt::format("ringrun: signalfd: {}", std::strerror(e)), 1);
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalRoute::~SignalRoute() {
  ::close(fd_);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &exec_mask_, nullptr);
}

void block_supervisor_signals() {
  sigset_t set = supervisor_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, &g_original_mask);
  g_signals_blocked = true;
}

}  // namespace ringrun
