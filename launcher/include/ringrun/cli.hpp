// The command line: `ringrun [OPTIONS] [--] PROGRAM [ARGS...]` and its subcommands.
#pragma once

#include <ringrun/invocation.hpp>

#include <string>
#include <vector>

namespace ringrun {

// Parses argv (argv[0] is the program name). Throws UsageError.
Invocation parse_command_line(const std::vector<std::string>& args);

}  // namespace ringrun
