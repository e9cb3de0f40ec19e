// A malformed input: a flag, a file or a variable's value. what() is the whole one-line message,
// naming the input and the fix, e.g. "SLURM_TASKS_PER_NODE='2(x3' : missing ')' at column 4".
// The launcher exits 2 on one (ringrun(1), EXIT STATUS); the runtime turns it into its own error
// code (ringrun(3), ringrun_last_error).
#pragma once

#include <stdexcept>

namespace ringrun {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ringrun
