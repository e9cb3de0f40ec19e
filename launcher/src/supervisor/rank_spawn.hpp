#pragma once
// The processes the supervisor starts by clone: each rank (clone(CLONE_VM | CLONE_VFORK),
// posix_spawn's way, with the supervisor's extras: own process group, parent-death signal, CPU
// and memory binding) and the guard that outlives ringrun.

#include <sched.h>
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace ringrun {

// The kernel's MAX_NUMNODES: the NUMA nodes --mem-bind local can name in the local backend.
inline constexpr unsigned kMaxNumaNodes = 1024;

// Everything the child needs, built by the parent before the clone: the child runs in the
// parent's memory until execve, beside the store's thread, so it may only make system calls.
struct RankLaunch {
  std::string executable;
  std::vector<char*> argv;  // null-terminated, pointing into the ProcessSpec
  std::vector<char*> envp;  // null-terminated
  int in_fd = -1, out_fd = -1, err_fd = -1;
  bool bind_cpus = false;
  cpu_set_t cpus{};
  bool bind_memory = false;
  unsigned long numa_mask[kMaxNumaNodes / (8 * sizeof(unsigned long))] = {};
  sigset_t exec_mask{};  // the signal mask the program starts with
  pid_t parent = 0;
  // The guard's slot for this rank (RankGuard::reserve), or null: the child writes its own pid
  // there before it execs, so no program runs that the guard does not know.
  pid_t* guard_slot = nullptr;
};

// What went wrong in the child before its program ran (it then exited 127).
struct SpawnFailure {
  enum Step { none, exec, affinity, memory_binding } step = none;
  int error = 0;  // errno
};

// Starts the rank; returns its pid once it has exec'd or failed (`failure` says which), or -1
// with errno when no process could be made. The calling thread waits only for the exec: no
// page is copied (a fork of the launcher would copy its page tables and then take a
// copy-on-write fault for each page either side writes), and no exec-status pipe is read.
// (Starting ranks from several threads at once was measured slower on 2 cores: 25.9 against
// 24.1 ms for -np 4.) Not thread-safe: one caller at a time.
pid_t spawn_rank(const RankLaunch& launch, SpawnFailure& failure);

// The guard: a small process that outlives ringrun by design. ringrun names each rank's process
// group to it; when ringrun ends without release() (SIGKILLed, crashed), the guard SIGKILLs
// every group, so no rank, nor anything a rank started, survives. It shares ringrun's memory
// (no fork: a copy of the page tables and a copy-on-write fault for every page written after
// it cost a launch ~2 ms here) and runs on its own stack with raw system calls only; the groups
// are in a shared page it reads once ringrun is gone.
class RankGuard {
 public:
  // Starts the guard for up to `ranks` process groups; throws LaunchError when it cannot.
  explicit RankGuard(std::size_t ranks);
  ~RankGuard();
  RankGuard(const RankGuard&) = delete;
  RankGuard& operator=(const RankGuard&) = delete;

  // Names a process group to the guard; a slot freed by unwatch is reused, so the capacity bounds
  // the groups alive at once, not the groups of the whole job (elastic mode replaces processes).
  void watch(pid_t group);
  // A slot for a rank about to start, for RankLaunch::guard_slot (null when the table is full).
  // Naming the group after spawn_rank returned would leave a window in which ringrun, SIGKILLed,
  // leaves a rank's children to nobody (the rank itself dies by its parent-death signal).
  pid_t* reserve();
  // The reserved slot's process could not be made: the slot is free again.
  void cancel(pid_t* slot);
  // `group` is gone (reaped and killed): the guard no longer kills it, so its number may be reused.
  void unwatch(pid_t group);
  // ringrun cleaned up itself: the guard exits without killing anything, and is reaped.
  void release();

  struct Table;  // the shared page: the groups, the pipe

 private:
  pid_t* free_slot();

  Table* table_ = nullptr;
  std::size_t table_bytes_ = 0;
  void* stack_ = nullptr;
  int write_fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace ringrun
