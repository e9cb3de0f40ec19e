// MPI programs on this host (ringrun(1), MPI PROGRAMS): the launch's edges. An MPI program that
// ringrun would start with the local backend goes under mpirun instead (one MPI world); one that
// still starts locally and initializes Open MPI is reported once, after the job (each rank was a
// world of 1).
#pragma once

#include <ringrun/plan.hpp>
#include <ringrun/process.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// For `--launcher auto` that resolved to local: mpirun when the program is an MPI program and
// mpirun is in PATH. `notes` gets the reason (for --verbose), `warnings` a line when mpirun is
// missing. Returns the launcher to use.
LauncherKind launcher_for_mpi_program(LauncherKind resolved, const std::vector<std::string>& program,
                                      const Environment& env, std::vector<std::string>& notes,
                                      std::vector<std::string>& warnings);

// Watches a directory of its own (in /dev/shm where it can, else TMPDIR or /tmp), given to every
// rank as Open MPI's session directory base
// (OMPI_MCA_orte_tmpdir_base): Open MPI creates its session directory there in MPI_Init, so an
// entry appearing means a rank initialized MPI without mpirun (a singleton). Open MPI removes the
// directory at MPI_Finalize; the directory's modification time, set to 0 at start, keeps the
// creation (an inotify instance did too, but closing one that holds a watch waits for the kernel's
// RCU grace period: 0 to 20 ms at every launch's end). Other MPI libraries are not seen here
// (the static check in launcher_for_mpi_program is what covers them).
class SingletonWatch {
 public:
  // nullptr when the user set the variable, the program is itself an MPI launcher, or no
  // directory could be made (then nothing is reported).
  static std::unique_ptr<SingletonWatch> start(const std::vector<ProcessSpec>& processes, const Environment& env);
  ~SingletonWatch();
  SingletonWatch(const SingletonWatch&) = delete;
  SingletonWatch& operator=(const SingletonWatch&) = delete;

  // Adds the variable to every process's environment.
  void apply(std::vector<ProcessSpec>& processes) const;
  // Whether Open MPI created anything in the directory since start.
  bool mpi_initialized() const;

 private:
  explicit SingletonWatch(std::string directory) : directory_(std::move(directory)) {}
  std::string directory_;
};

// The one-line hint printed after a local job whose ranks were MPI singletons.
inline constexpr const char* kSingletonHint =
    "ringrun: hint: the ranks initialized MPI as singletons (each one an MPI world of 1) because the local "
    "backend started them without mpirun; give --launcher mpirun to make them one MPI world";

// Before any remote start: of `remote_hosts` (from `flag`, e.g. "-H 'a:1,b'"), those that neither
// resolve (getaddrinfo) nor are named by a `Host` line of ~/.ssh/config (ssh's own aliases), all
// of them in one InputError naming the flag, the hosts and the fix.
void require_resolvable_hosts(const std::vector<std::string>& remote_hosts, const std::string& flag,
                              const Environment& env);

// The names `Host` lines of an ssh_config text give (patterns with * ? ! are left out).
std::vector<std::string> ssh_config_host_names(std::string_view config);

}  // namespace ringrun
