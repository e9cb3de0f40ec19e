// The supervisor: starts processes, streams their output line by line, forwards signals, stops
// everything when one fails, and returns the exit status ringrun exits with.
#pragma once

#include <ringrun/process.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

struct SupervisorOptions {
  bool tag_output = true;                       // "[RANK]<stdout>:" prefixes
  bool timestamp_output = false;                // each line after the local time, as asctime(3) writes it
  std::optional<std::string> output_directory;  // --output-filename DIR: DIR/rank.N/{stdout,stderr}
  double grace_period_s = 10;                   // SIGTERM, then SIGKILL after this long
  bool verbose = false;
};

// Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 in the calling thread and remembers the mask it had.
// Call it first thing in main(), before any thread exists: threads inherit the mask, so these
// signals reach the supervisor's signalfd and not a thread that would discard them.
void block_supervisor_signals();

// Runs the processes to the end; returns 0 when all exit 0, else the first failing one's code
// (128+signal for a signal), or 128+signal when ringrun itself was interrupted.
int supervise(const std::vector<ProcessSpec>& processes, const SupervisorOptions& options);

}  // namespace ringrun
