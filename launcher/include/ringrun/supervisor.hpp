// The supervisor: starts processes, streams their output line by line, forwards signals, stops
// everything when one fails, and returns the exit status ringrun exits with.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringrun {

// How a launcher process's output names its ranks, so lines can be re-tagged as [RANK]<stdout>:.
enum class OutputRetag { none, srun_label /* "3: line" */, mpirun_tag /* "[1,3]<stdout>:line" */ };

// One process to start. For the local backend, one per rank; for srun/mpirun, the launcher itself.
struct ProcessSpec {
  int rank = 0;                    // the tag of its output and the name in the summary line
  std::string host;                // for the summary line
  std::string label;               // "rank" or e.g. "srun"
  std::string executable;          // resolved path (see resolve_program)
  std::vector<std::string> argv;   // exactly as given, argv[0] included
  std::vector<std::string> env;    // complete environment, NAME=VALUE
  std::vector<unsigned> cpus;      // CPU affinity applied before exec; empty = inherit
  bool stdin_inherit = false;      // rank 0 reads ringrun's stdin when it is not a terminal
  OutputRetag retag = OutputRetag::none;
  std::vector<std::string> rank_hosts;  // srun/mpirun: the host of each rank it starts, for the
                                        // summary line naming the rank that failed
};

struct SupervisorOptions {
  bool tag_output = true;                       // "[RANK]<stdout>:" prefixes
  std::optional<std::string> output_directory;  // --output-filename DIR: DIR/rank.N/{stdout,stderr}
  double grace_period_s = 10;                   // SIGTERM, then SIGKILL after this long
  bool verbose = false;
};

// Finds `program` as execvp would, in `path` (a PATH value). Throws LaunchError with exit code 127
// and a one-line message when it cannot be found or executed.
std::string resolve_program(const std::string& program, const std::string& path);

struct LaunchError : std::runtime_error {
  LaunchError(const std::string& message, int exit_code) : std::runtime_error(message), exit_code(exit_code) {}
  int exit_code;
};

// Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 in the calling thread and remembers the mask it had.
// Call it first thing in main(), before any thread exists: threads inherit the mask, so these
// signals reach the supervisor's signalfd and not a thread that would discard them.
void block_supervisor_signals();

// Runs the processes to the end; returns 0 when all exit 0, else the first failing one's code
// (128+signal for a signal), or 128+signal when ringrun itself was interrupted.
int supervise(const std::vector<ProcessSpec>& processes, const SupervisorOptions& options);

}  // namespace ringrun
