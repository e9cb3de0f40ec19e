#include "supervisor/rank_spawn.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <csignal>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <new>

namespace ringrun {
namespace {

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

// CLONE_VM: a child borrows the parent's memory (a rank until its execve, the guard for good).
// ThreadSanitizer intercepts clone and treats the child as a fork (it resets its own state
// there), which shared memory would corrupt: its builds copy the memory instead, as fork does.
constexpr int kShareMemory = kThreadSanitizer ? 0 : CLONE_VM;

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
  // A plain store into the guard's shared page: it reads the table only once ringrun is gone,
  // and ringrun is suspended until this child has exec'd (CLONE_VFORK).
  if (launch->guard_slot) *launch->guard_slot = static_cast<pid_t>(::syscall(SYS_getpid));
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

constexpr int kCloneFlags = kShareMemory | CLONE_VFORK | SIGCHLD;

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

// ---------------------------------------------------------------------------------------------
// The guard

struct RankGuard::Table {
  std::atomic<std::size_t> count{0};
  std::size_t capacity = 0;
  int read_fd = -1, write_fd = -1;
  pid_t* groups() { return reinterpret_cast<pid_t*>(this + 1); }  // capacity entries follow
};

namespace {

constexpr std::size_t kGuardStack = 16 * 1024;
constexpr char kReleased = 'r';

// The guard itself: raw system calls only. It runs beside ringrun in its memory, so it may not
// touch errno while ringrun runs; its calls cannot fail until ringrun is gone (signals are
// blocked, the pipe is valid), and kill()'s ESRCH for a group already gone comes after.
int guard_main(void* arg) {
  auto* table = static_cast<RankGuard::Table*>(arg);
  ::syscall(SYS_setsid);  // out of the terminal's process group: Ctrl-C is ringrun's to handle
  unsigned long all = ~0UL;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, nullptr, sizeof all);
  ::syscall(SYS_close, table->write_fd);  // its copy: EOF must come when ringrun's closes
  char word = 0;
  long n;
  do n = ::syscall(SYS_read, table->read_fd, &word, 1);
  while (n < 0);  // cannot happen with every signal blocked; never taken for "ringrun is gone"
  if (n == 1 && word == kReleased) ::syscall(SYS_exit_group, 0);
  // ringrun is gone: its memory is still ours, and the table is final.
  const std::size_t count = table->count.load(std::memory_order_acquire);
  // A free entry (0: kill(-0) would be the guard's own group) or one whose rank never got as far
  // as naming itself (-1) is skipped.
  for (std::size_t i = 0; i < count && i < table->capacity; ++i)
    if (table->groups()[i] > 0) ::syscall(SYS_kill, -table->groups()[i], SIGKILL);
  ::syscall(SYS_exit_group, 0);
  return 0;
}

}  // namespace

RankGuard::RankGuard(std::size_t ranks) {
  table_bytes_ = sizeof(Table) + ranks * sizeof(pid_t);
  // Shared: in TSan builds the guard has a copy of the memory, and must still see the groups.
  void* table = ::mmap(nullptr, table_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  stack_ = ::mmap(nullptr, kGuardStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  int fds[2] = {-1, -1};
  if (table == MAP_FAILED || stack_ == MAP_FAILED || ::pipe2(fds, O_CLOEXEC) != 0) {
    const int e = errno;
    if (table != MAP_FAILED) ::munmap(table, table_bytes_);
    if (stack_ != MAP_FAILED) ::munmap(stack_, kGuardStack);
    stack_ = nullptr;
    throw LaunchError(fmt::format("ringrun: cannot start the guard process: {}", std::strerror(e)), 1);
  }
  table_ = new (table) Table;
  table_->capacity = ranks;
  table_->read_fd = fds[0];
  table_->write_fd = fds[1];
  write_fd_ = fds[1];
  sigset_t all, before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_ = ::clone(guard_main, static_cast<char*>(stack_) + kGuardStack, kShareMemory | SIGCHLD, table_);
  const int clone_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(fds[0]);
  if (pid_ < 0) {
    ::close(fds[1]);
    throw LaunchError(fmt::format("ringrun: cannot start the guard process: {}", std::strerror(clone_error)), 1);
  }
}

// An entry is 0 when free, kReserved while its rank starts, else a process group.
constexpr pid_t kReserved = -1;

pid_t* RankGuard::free_slot() {
  const std::size_t n = table_->count.load(std::memory_order_relaxed);
  // The guard reads the table only once ringrun is gone, so an entry may be rewritten in place.
  for (std::size_t i = 0; i < n; ++i)
    if (table_->groups()[i] == 0) return &table_->groups()[i];
  if (n >= table_->capacity) return nullptr;
  table_->groups()[n] = 0;
  table_->count.store(n + 1, std::memory_order_release);
  return &table_->groups()[n];
}

void RankGuard::watch(pid_t group) {
  if (group <= 0) return;
  if (pid_t* slot = free_slot()) *slot = group;
}

pid_t* RankGuard::reserve() {
  pid_t* slot = free_slot();
  if (slot) *slot = kReserved;
  return slot;
}

void RankGuard::cancel(pid_t* slot) {
  if (slot) *slot = 0;
}

void RankGuard::unwatch(pid_t group) {
  const std::size_t n = table_->count.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i)
    if (table_->groups()[i] == group) table_->groups()[i] = 0;
}

void RankGuard::release() {
  if (write_fd_ < 0) return;
  (void)!::write(write_fd_, &kReleased, 1);
  ::close(write_fd_);
  write_fd_ = -1;
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

RankGuard::~RankGuard() {
  // Not released (an exception): the guard ends the ranks, as it would if ringrun died, and is
  // reaped before its stack and table go.
  if (write_fd_ >= 0) {
    ::close(write_fd_);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  ::munmap(table_, table_bytes_);
  ::munmap(stack_, kGuardStack);
}

}  // namespace ringrun
