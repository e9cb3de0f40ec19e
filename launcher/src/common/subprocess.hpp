// Other programs, as the launcher finds and asks them: a program found in PATH as execvp would
// find it, and a short program (srun, scontrol, mpirun, python3) run to its end or its deadline
// with its output captured. Ranks are not started here: the supervisor clones them itself
// (supervisor/rank_spawn.hpp).
#pragma once

#include <ringrun/allocation.hpp>

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// The search path when the environment has none.
inline constexpr const char* kDefaultPath = "/usr/bin:/bin";

// env's PATH, else kDefaultPath.
std::string search_path(const Environment& env);

// Finds `program` as execvp would, in `path` (a PATH value). Throws LaunchError with exit code 127
// and a one-line message when it cannot be found or executed.
std::string resolve_program(const std::string& program, const std::string& path);

// The first executable file `program` in `path`; nullopt when there is none.
std::optional<std::string> find_in_path(const std::string& program, const std::string& path);

// "exited with code 3", "was killed by signal 9 (SIGKILL)": how a waitpid status reads in a summary.
std::string describe_status(int wait_status);

// The status ringrun returns for a process that ended with `wait_status`: its code, 128+signal.
int exit_code_of(int wait_status);

// Where a program's stderr goes.
enum class ErrorOutput { inherited, captured, discarded };

struct ProgramCall {
  std::string executable;                            // the file to run (resolve_program's path)
  std::vector<std::string> argv;                     // argv[0] included, as the program sees it
  std::optional<Environment> env;                    // nullopt: ringrun's own
  std::chrono::milliseconds timeout{0};              // then the program is killed (SIGKILL)
  ErrorOutput error_output = ErrorOutput::captured;  // captured: into `output`, with stdout
  // In a process group of its own, so that killing the group ends what it started too.
  bool own_group = false;
  const sigset_t* signal_mask = nullptr;  // the program's signal mask; nullptr: ringrun's
};

// A started program: its pid and the read end of its stdout (close-on-exec, blocking).
struct StartedProgram {
  pid_t pid = -1;
  int output_fd = -1;
};

// The one way the launcher starts another program (ranks aside): stdin on /dev/null, stdout into
// a pipe, stderr as the call says, SIGPIPE back to its default (the supervisor ignores it, and an
// ignored signal survives exec). nullopt when it could not be started, with the errno in `error`.
std::optional<StartedProgram> start_program(const ProgramCall& call, int* error = nullptr);

struct ProgramResult {
  int wait_status = 0;     // waitpid's
  bool timed_out = false;  // killed at the deadline
  std::string output;      // stdout, and stderr when captured

  // The exit code when it exited by itself; nullopt when a signal or the deadline ended it.
  std::optional<int> exit_code() const;
};

// Runs the call (start_program) and waits for its end or its deadline. nullopt when it could not
// be started.
std::optional<ProgramResult> run_program(const ProgramCall& call);

}  // namespace ringrun
