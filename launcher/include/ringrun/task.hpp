// The task shim (`ringrun task -- PROGRAM ARGS`), started by srun or mpirun once per rank.
#pragma once

#include <ringrun/allocation.hpp>

#include <string>
#include <vector>

namespace ringrun {

// Applies this rank's slot (environment, CPU and memory binding) and execs the program.
// Returns only by throwing.
int run_task(const std::vector<std::string>& program, const Environment& env);

}  // namespace ringrun
