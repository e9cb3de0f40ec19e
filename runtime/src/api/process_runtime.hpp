// The process-wide runtime behind the C API: one communicator between ringrun_init() and
// ringrun_finalize(), guarded by one mutex that every C API call holds. The engine (async named
// operations) can take the mutex and drive process_communicator() from its background thread.
#pragma once

#include <atomic>
#include <exception>
#include <chrono>
#include <mutex>
#include <string>

#include "comm/communicator.hpp"

namespace ringrun::core {

struct Bootstrap;

std::mutex& process_mutex();

// A communicator's configuration for these ranks, with the transports' settings from the
// environment (RINGRUN_DISABLE_SHM, RINGRUN_SHM_SLOT_BYTES, RINGRUN_TCP_STREAMS): the world's,
// and a process set's.
CommunicatorConfig communicator_config(int rank, int size, const std::string& hostname, const std::string& address,
                                       std::chrono::milliseconds timeout, Exchange* exchange);
Communicator* process_communicator();  // null when not initialized; call with process_mutex() held

// With process_mutex() held and no communicator: creates it from boot (what names the caller in
// errors; elastic maps a lost peer to RINGRUN_ERR_RESET), keeps boot's exchange and starts the
// engine unless RINGRUN_ENGINE_AT_INIT=0. Leaves nothing behind when it throws.
void start_runtime_locked(Bootstrap&& boot, bool elastic, const char* what);
// With process_mutex() held: stops the engine (pending ops fail) and closes the communicator and
// its exchange: after the finalize barrier when orderly, else at once (what the peers see when a
// process dies). No-op without a communicator. Throws when the barrier fails; closes either way.
void stop_runtime_locked(bool orderly);

// Elastic mode (elastic_c_api.cpp), with process_mutex() held: ringrun_init's join of the world the
// environment names; whether the process holds elastic state (its control connection); and its
// release in ringrun_finalize.
void elastic_init_locked();
bool elastic_active_locked();
void elastic_release_locked() noexcept;

// Stores the exception's message as the calling thread's ringrun_last_error() and returns its
// RINGRUN_ERR_* code (RINGRUN_ERR_INTERNAL for anything that is not a RuntimeError).
int record_error(const std::exception_ptr& error);
// Empties the calling thread's last error. Inline: until some thread records an error, no
// thread's message can be non-empty and the call costs one relaxed load (a successful async op
// clears twice, and a thread-local access from a shared library is a function call).
inline std::atomic<bool> g_error_recorded{false};
void clear_recorded_error();
inline void clear_error() {
  if (g_error_recorded.load(std::memory_order_relaxed)) clear_recorded_error();
}

}  // namespace ringrun::core
