// Other programs, as the launcher finds them: a program found in PATH as execvp would find it,
// and how its end reads. Ranks are not started here: the supervisor clones them itself
// (supervisor/rank_spawn.hpp).
#pragma once

#include <ringrun/allocation.hpp>

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

}  // namespace ringrun
