// The launcher's ground vocabulary, below every folder of launcher/src: a process to start
// (ProcessSpec, with how its output names ranks) and the two ways a launch fails before or while
// it runs (UsageError, LaunchError). main() maps each to ringrun's exit status.
#pragma once

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

// Bad usage: what() is the one-line message; ringrun exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A launch that cannot go on: what() is the one-line message; ringrun exits with exit_code.
struct LaunchError : std::runtime_error {
  LaunchError(const std::string& message, int exit_code) : std::runtime_error(message), exit_code(exit_code) {}
  int exit_code;
};

}  // namespace ringrun
