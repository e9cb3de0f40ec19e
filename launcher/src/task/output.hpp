// The task shim's output under srun and mpirun: the rank's lines as records
// (supervisor/rank_output.hpp), so that every line arrives whole and named.
#pragma once

namespace ringrun {

// The task shim, right before it execs the program: fds 1 and 2 become pipes to a forwarder
// process, which writes what arrives as records on the shim's own stdout and stderr and exits
// when every writer closed them. The program keeps the task's pid: signals and exit statuses
// reach srun and mpirun as before. Throws LaunchError when the pipes or the fork fail.
void start_record_forwarder();

}  // namespace ringrun
