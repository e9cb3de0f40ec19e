// The process-wide engine behind the C API's async calls (engine_c_api.cpp). It starts in
// ringrun_init() (start_process_engine; else at the first async call) and stops in
// ringrun_finalize(). While it runs, its thread is the communicator's only user: the synchronous
// C calls go through it as one-off named ops.
#pragma once

#include "engine/engine.hpp"

namespace ringrun::engine {

// A synchronous collective of the C API (what names it for errors, e.g. "ringrun_allreduce"):
// through the engine while it runs, else directly on the communicator under process_mutex().
// Returns RINGRUN_OK or a code, with the calling thread's last error set.
int synchronous_collective(const char* what, const OpRequest& request);

// Call with process_mutex() held, right after ringrun_init() created the communicator: starts the
// engine on every rank at once (as Horovod's init starts its background thread). Started lazily at
// a rank's first async call instead, a rank whose first named op comes late has no engine, so its
// peers' engines block in their first negotiation, where no stall check can run (and a synchronous
// call there would meet a peer's negotiation). Idempotent; throws RuntimeError without a communicator.
void start_process_engine();

// Call with process_mutex() held, before the communicator is finalized: shuts the engine down
// (collective; pending ops complete with an error) and joins its thread. No-op when none runs.
void shutdown_process_engine() noexcept;

}  // namespace ringrun::engine
