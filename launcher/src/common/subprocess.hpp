// Other programs, as the launcher finds and asks them: a program found in PATH as execvp would
// find it, and a short program (srun, scontrol, mpirun, python3) run to its end or its deadline
// with its output captured. Ranks are not started here: the supervisor clones them itself
// (supervisor/rank_spawn.hpp).
#pragma once

#include <ringrun/allocation.hpp>

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
};

struct ProgramResult {
  int wait_status = 0;     // waitpid's
  bool timed_out = false;  // killed at the deadline
  std::string output;      // stdout, and stderr when captured

  // The exit code when it exited by itself; nullopt when a signal or the deadline ended it.
  std::optional<int> exit_code() const;
};

// Runs the call without a shell, stdin on /dev/null, and waits for its end or its deadline.
// nullopt when it could not be started.
std::optional<ProgramResult> run_program(const ProgramCall& call);

}  // namespace ringrun
