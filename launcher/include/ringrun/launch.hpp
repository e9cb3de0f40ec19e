// The edges of a launch: gathering the inputs of the plan (environment, files, topology, ports,
// secret), then handing the plan to a backend and the supervisor.
#pragma once

#include <ringrun/cli.hpp>

namespace ringrun {

Environment environment_from(char** envp);

// Runs the invocation to the end; returns ringrun's exit status. Throws UsageError/InputError
// (exit 2), LaunchError (its code) and topology::TopologyError (exit 2).
int run_invocation(const Invocation& invocation, const Environment& env);

}  // namespace ringrun
