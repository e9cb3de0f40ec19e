// Process sets (ringrun_add_process_set, Horovod's): subsets of the world, each with a communicator
// and an engine of its own, so that a set's ops negotiate, fuse and fail among its members while
// the world's engine and other sets run on. Sets are created and removed by every rank of the world
// together, through the world's engine: one allgather carries the members' addresses (the new
// communicator's rendezvous) and every rank's list of ranks (they must agree). Set 0 is the world.
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/engine.hpp"

namespace ringrun::engine {

// The engine that runs this rank's ops of `process_set` (0: the world's, started if need be).
// Throws RuntimeError (RINGRUN_ERR_INVALID_ARGUMENT) for an unknown set or one this rank is not in.
Engine& engine_of_set(int process_set, const char* what);
// The counter behind the automatic names of a set's unnamed ops (engine_c_api.cpp's rotation).
std::atomic<std::uint64_t>& routed_calls_of_set(int process_set);

// ringrun_finalize, before the world's engine stops: every set's engine (collective among its
// members) and communicator. Pending ops of the sets fail.
void shutdown_process_sets() noexcept;

// The world's engine as the C API runs it (engine_c_api.cpp).
Engine& world_engine(const char* what);
std::atomic<std::uint64_t>& world_routed_calls();

}  // namespace ringrun::engine
