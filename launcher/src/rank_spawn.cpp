#include "rank_spawn.hpp"

#include <cerrno>
#include <csignal>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

namespace ringrun {
namespace {

struct ChildContext {
  const RankLaunch* launch;
  SpawnFailure* failure;
};

// The child, until execve: raw system calls only (no allocation, no locks, and nothing a
// sanitizer intercepts: its bookkeeping is the parent's, shared), on its own stack. What fails is
// written into the parent's SpawnFailure, which the parent reads once it resumes.
int start_child(void* context) {
  const auto& [launch, failure] = *static_cast<ChildContext*>(context);
  auto fail = [failure = failure](SpawnFailure::Step step) {
    *failure = {step, errno};
    ::syscall(SYS_exit_group, 127);
  };
  ::syscall(SYS_setpgid, 0, 0);
  ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::syscall(SYS_getppid) != launch->parent) ::syscall(SYS_exit_group, 127);  // ringrun died before prctl
  const int fds[3] = {launch->in_fd, launch->out_fd, launch->err_fd};
  for (int target = 0; target < 3; ++target)
    if (fds[target] != target) ::syscall(SYS_dup3, fds[target], target, 0);
  // SIGPIPE back to its default (the launcher ignores it): the kernel's sigaction layout,
  // handler, flags, restorer, mask.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } default_action{SIG_DFL, 0, nullptr, 0};
  ::syscall(SYS_rt_sigaction, SIGPIPE, &default_action, nullptr, sizeof default_action.mask);
  if (launch->bind_cpus && ::syscall(SYS_sched_setaffinity, 0, sizeof launch->cpus, &launch->cpus) != 0)
    fail(SpawnFailure::affinity);
  // maxnode counts bits, plus one: the kernel drops the last bit (set_mempolicy(2), BUGS).
  if (launch->bind_memory && ::syscall(SYS_set_mempolicy, MPOL_BIND, launch->numa_mask, kMaxNumaNodes + 1) != 0)
    fail(SpawnFailure::memory_binding);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &launch->exec_mask, nullptr, sizeof(unsigned long));
  ::syscall(SYS_execve, launch->executable.c_str(), launch->argv.data(), launch->envp.data());
  fail(SpawnFailure::exec);
  return 127;
}

// The child's stack: used by one child at a time (the caller waits until it has exec'd), kept
// for the next. 64 KiB: start_child and the system calls need a few hundred bytes. The failure
// report lives in a shared page, so that it reaches the parent whether or not the child shares
// its memory.
constexpr std::size_t kChildStack = 64 * 1024;

struct ChildMemory {
  char* stack_top = nullptr;
  SpawnFailure* failure = nullptr;
};

ChildMemory child_memory() {
  void* stack = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  void* shared = ::mmap(nullptr, sizeof(SpawnFailure), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED || shared == MAP_FAILED) return {};
  return {static_cast<char*>(stack) + kChildStack, new (shared) SpawnFailure};
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// CLONE_VM: the child borrows the parent's memory until execve. ThreadSanitizer intercepts clone
// and treats the child as a fork (it resets its own state there), which shared memory would
// corrupt: its builds copy the memory instead, as fork does.
constexpr int kCloneFlags = (kThreadSanitizer ? 0 : CLONE_VM) | CLONE_VFORK | SIGCHLD;

}  // namespace

pid_t spawn_rank(const RankLaunch& launch, SpawnFailure& failure) {
  static const ChildMemory memory = child_memory();
  if (!memory.stack_top) return -1;  // errno from mmap
  *memory.failure = {};
  ChildContext context{&launch, memory.failure};
  // Every signal blocked across the clone: no handler may run on the shared memory in the child
  // (the child sets the program's mask just before execve).
  sigset_t all, before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid = ::clone(start_child, memory.stack_top, kCloneFlags, &context);
  const int clone_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  failure = *memory.failure;
  errno = clone_error;
  return pid;
}

}  // namespace ringrun
