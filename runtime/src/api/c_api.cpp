// The C API (ringrun/ringrun.h) over the process-wide communicator.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/elastic.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "api/process_runtime.hpp"
#include "api/process_engine.hpp"
#include "api/process_sets.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"
#include "core/device_memory.hpp"
#include "transport/tcp/tcp_mesh.hpp"
#include "ringrun/store.hpp"
#ifdef RINGRUN_HAVE_NCCL
#include "transport/nccl/cuda_api.hpp"
#endif

namespace ringrun::core {
namespace {

struct ProcessRuntime {
  std::unique_ptr<Exchange> exchange;  // kept until finalize: it may host rank 0's store
  std::unique_ptr<Communicator> communicator;
};

ProcessRuntime g_runtime;
thread_local std::string t_last_error;

}  // namespace

std::mutex& process_mutex() {
  static std::mutex mutex;
  return mutex;
}

Communicator* process_communicator() { return g_runtime.communicator.get(); }

int record_error(const std::exception_ptr& error) {
  // Before the message: this thread's later clear_error() must see the flag (program order).
  g_error_recorded.store(true, std::memory_order_relaxed);
  try {
    std::rethrow_exception(error);
  } catch (const RuntimeError& e) {
    t_last_error = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    t_last_error = "out of memory";
  } catch (const std::exception& e) {
    t_last_error = fmt::format("internal error: {}", e.what());
  } catch (...) {
    t_last_error = "internal error: unknown exception";
  }
  return RINGRUN_ERR_INTERNAL;
}

void clear_recorded_error() { t_last_error.clear(); }

namespace {

// Runs body with the mutex held and the communicator present; maps exceptions to codes.
template <typename Body> int guarded(const char* what, Body&& body) {
  try {
    std::lock_guard lock(process_mutex());
    if (!g_runtime.communicator)
      throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("{}: ringrun_init() has not been called", what));
    int result = body(*g_runtime.communicator);
    clear_error();
    return result;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

}  // namespace

CommunicatorConfig communicator_config(int rank, int size, const std::string& hostname, const std::string& address,
                                       std::chrono::milliseconds timeout, Exchange* exchange) {
  CommunicatorConfig config;
  config.rank = rank;
  config.size = size;
  config.hostname = hostname;
  config.listen_address = address;
  config.timeout = timeout;
  config.exchange = exchange;
  config.enable_shm = !*env_flag(variables::kDisableShm);
  config.shm_slot_bytes = static_cast<std::size_t>(env_integer(variables::kShmSlotBytes).value_or(0));  // 0: automatic
  config.tcp_streams = static_cast<int>(env_integer(variables::kTcpStreams).value_or(0));  // 0: automatic
  return config;
}

void start_runtime_locked(Bootstrap&& boot, bool elastic, const char* what) {
  CommunicatorConfig config =
      communicator_config(boot.rank, boot.size, boot.hostname, boot.listen_address, boot.timeout, boot.exchange.get());
  config.elastic = elastic;
  try {
    g_runtime.communicator = Communicator::create(config);
  } catch (const ringrun::RuntimeError& e) {
    throw ringrun::RuntimeError(e.code(), fmt::format("{}: rank {} of {} (from {}): {}", what, boot.rank, boot.size,
                                                      boot.source, e.what()));
  }
  g_runtime.exchange = std::move(boot.exchange);
  // Every rank's engine joins negotiation cycles from the start, as Horovod's init starts its
  // background thread (see start_process_engine). RINGRUN_ENGINE_AT_INIT=0 keeps the synchronous
  // calls on the transports' direct path until a first async op, for programs that make none.
  if (*env_flag(variables::kEngineAtInit)) {
    try {
      ringrun::engine::start_process_engine();
    } catch (...) {
      g_runtime.communicator->abort();
      g_runtime.communicator.reset();
      g_runtime.exchange.reset();
      throw;
    }
  }
}

void stop_runtime_locked(bool orderly) {
  if (!g_runtime.communicator) return;
  ringrun::engine::shutdown_process_sets();    // every set's engine and communicator first
  ringrun::engine::shutdown_process_engine();  // pending async ops fail; its thread joins
  auto communicator = std::move(g_runtime.communicator);
  auto exchange = std::move(g_runtime.exchange);
  if (orderly)
    communicator->finalize();
  else
    communicator->abort();
}

}  // namespace ringrun::core

using namespace ringrun::core;

extern "C" {

int ringrun_init(void) {
  try {
    std::lock_guard lock(process_mutex());
    if (g_runtime.communicator) return RINGRUN_OK;  // already initialized: nothing to do
    if (elastic_requested())
      elastic_init_locked();
    else
      start_runtime_locked(bootstrap_from_environment(), false, "ringrun_init");
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

void ringrun_set_interrupt_check(int (*check)(void* arg), void* arg) { set_interrupt_check(check, arg); }

int ringrun_finalize(void) {
  try {
    std::lock_guard lock(process_mutex());
    // The control connection of elastic mode goes last, also after a reset that left no world.
    struct ReleaseElastic {
      ~ReleaseElastic() { elastic_release_locked(); }
    } release_elastic;
    if (!g_runtime.communicator) {
      if (elastic_active_locked()) {
        clear_error();
        return RINGRUN_OK;
      }
      throw ringrun::RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, "ringrun_finalize: ringrun_init() has not been called");
    }
    stop_runtime_locked(true);
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

int ringrun_rank(void) { return guarded("ringrun_rank", [](Communicator& c) { return c.world().rank; }); }
int ringrun_size(void) { return guarded("ringrun_size", [](Communicator& c) { return c.world().size; }); }
int ringrun_local_rank(void) { return guarded("ringrun_local_rank", [](Communicator& c) { return c.world().local_rank; }); }
int ringrun_local_size(void) { return guarded("ringrun_local_size", [](Communicator& c) { return c.world().local_size; }); }
int ringrun_cross_rank(void) { return guarded("ringrun_cross_rank", [](Communicator& c) { return c.world().cross_rank; }); }
int ringrun_cross_size(void) { return guarded("ringrun_cross_size", [](Communicator& c) { return c.world().cross_size; }); }
const char* ringrun_transport_name(void) {
  const char* name = nullptr;
  guarded("ringrun_transport_name", [&](Communicator& c) {
    name = c.transport_name();  // a string literal: valid after the lock is released
    return 0;
  });
  return name;
}

// While the engine runs, the synchronous collectives go through it (its thread is then the
// communicator's only user); before, straight to the communicator.
using ringrun::engine::OpRequest;

int ringrun_allreduce(const void* send, void* recv, size_t count, ringrun_dtype dtype, ringrun_op op) {
  auto request = OpRequest::plain(Collective::allreduce, send, recv, count, dtype);
  request.op = op;
  return ringrun::engine::synchronous_collective("ringrun_allreduce", request);
}

int ringrun_broadcast(void* buf, size_t count, ringrun_dtype dtype, int root) {
  auto request = OpRequest::plain(Collective::broadcast, buf, buf, count, dtype);
  request.root = root;
  return ringrun::engine::synchronous_collective("ringrun_broadcast", request);
}

int ringrun_allgather(const void* send, size_t count, ringrun_dtype dtype, void* recv) {
  auto request = OpRequest::plain(Collective::allgather, send, recv, count, dtype);
  return ringrun::engine::synchronous_collective("ringrun_allgather", request);
}

int ringrun_allgatherv(const void* send, size_t count, ringrun_dtype dtype, void* recv, const size_t* counts,
                       size_t ncounts) {
  // Ranks with fewer elements pad to the largest count, one allgather runs, and the blocks are
  // packed: one collective (routed through the engine like the others when it runs) where a
  // ring of variable blocks would need every transport to learn a new shape.
  std::vector<std::byte> padded;
  std::vector<std::byte> gathered;
  std::size_t largest = 0;
  std::size_t element = 0;
  try {
    const int size = ringrun_size();
    const int rank = ringrun_rank();
    if (size < 0 || rank < 0) return size < 0 ? size : rank;
    if (!counts || ncounts != static_cast<std::size_t>(size))
      throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                                  fmt::format("ringrun_allgatherv: counts must hold one count per rank ({}), got {}", size,
                                              counts ? ncounts : 0));
    if (counts[rank] != count)
      throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                                  fmt::format("ringrun_allgatherv: count {} differs from counts[{}] = {}", count, rank, counts[rank]));
    if (!valid_dtype(dtype))
      throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("ringrun_allgatherv: unknown dtype {}", static_cast<int>(dtype)));
    if (locate_buffer(send).device || locate_buffer(recv).device)
      throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                                  "ringrun_allgatherv: device buffers are not supported; pad to the largest count and use ringrun_allgather");
    largest = *std::max_element(counts, counts + size);
    if (std::all_of(counts, counts + size, [&](std::size_t c) { return c == largest; }))
      return ringrun_allgather(send, count, dtype, recv);
    element = dtype_size(dtype);
    padded.resize(largest * element);
    if (count) std::memcpy(padded.data(), send, count * element);
    gathered.resize(largest * element * static_cast<std::size_t>(size));
    const int code = ringrun_allgather(padded.data(), largest, dtype, gathered.data());
    if (code != RINGRUN_OK) return code;
    auto* out = static_cast<std::byte*>(recv);
    for (int r = 0; r < size; ++r) {
      if (counts[r]) std::memcpy(out, gathered.data() + static_cast<std::size_t>(r) * largest * element, counts[r] * element);
      out += counts[r] * element;
    }
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

int ringrun_barrier(void) {
  OpRequest request;
  request.kind = Collective::barrier;
  return ringrun::engine::synchronous_collective("ringrun_barrier", request);
}

const char* ringrun_last_error(void) { return t_last_error.c_str(); }

int ringrun_nccl_version(void) {
#ifdef RINGRUN_HAVE_NCCL
  try {
    return ringrun::core::nccl_loaded_version();
  } catch (...) {
    return record_error(std::current_exception());
  }
#else
  t_last_error = "this libringrun_runtime was compiled without NCCL's headers; rebuild it with NCCL_HOME naming an "
                 "NCCL (pip install nvidia-nccl-cu13) and -DRINGRUN_WITH_NCCL=ON";
  return RINGRUN_ERR_INVALID_ARGUMENT;
#endif
}

}  // extern "C"
