// The process-wide runtime behind the C API: one communicator between ringrun_init() and
// ringrun_finalize(), guarded by one mutex that every C API call holds. The engine (async named
// operations) can take the mutex and drive process_communicator() from its background thread.
#pragma once

#include <atomic>
#include <exception>
#include <mutex>

#include "core/communicator.hpp"

namespace ringrun::core {

std::mutex& process_mutex();
Communicator* process_communicator();  // null when not initialized; call with process_mutex() held

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
