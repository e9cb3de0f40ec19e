// The process-wide runtime behind the C API: one communicator between ringrun_init() and
// ringrun_finalize(), guarded by one mutex that every C API call holds. The engine (async named
// operations) can take the mutex and drive process_communicator() from its background thread.
#pragma once

#include <exception>
#include <mutex>

#include "core/communicator.hpp"

namespace ringrun::core {

std::mutex& process_mutex();
Communicator* process_communicator();  // null when not initialized; call with process_mutex() held

// Stores the exception's message as the calling thread's ringrun_last_error() and returns its
// RINGRUN_ERR_* code (RINGRUN_ERR_INTERNAL for anything that is not a RuntimeError).
int record_error(const std::exception_ptr& error);
void clear_error();

}  // namespace ringrun::core
