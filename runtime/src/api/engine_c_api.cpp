// The engine's part of the C API: ringrun_*_async, ringrun_wait, ringrun_test, and the routing of
// the synchronous collectives while the engine runs.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "api/process_runtime.hpp"
#include "api/process_engine.hpp"
#include "api/process_sets.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"

// A ringrun_handle is the op's OpState itself, carrying the submitter's hold on it until
// ringrun_wait takes it back. (ringrun_handle_s is never defined.)
namespace {

ringrun_handle to_handle(ringrun::engine::OpRef state) { return reinterpret_cast<ringrun_handle>(state.release()); }

ringrun::engine::OpState& from_handle(ringrun_handle handle) { return *reinterpret_cast<ringrun::engine::OpState*>(handle); }

}  // namespace

namespace ringrun::engine {
namespace {

// Guarded by process_mutex(). A function-local static: first built after the C API's runtime, so
// destroyed before it at exit (a program that never called ringrun_finalize()).
std::unique_ptr<Engine>& engine_slot() {
  static std::unique_ptr<Engine> engine;
  return engine;
}
// The running engine, set under process_mutex() when it starts and cleared when it stops:
// submissions read it without taking the mutex (two locked instructions per op fewer).
std::atomic<Engine*> g_running{nullptr};
// Stopped engines stay allocated until exit (their buffers released by Engine::shutdown): a
// submission racing with ringrun_finalize(), which the API does not allow, then meets an engine
// that refuses it rather than freed memory. One per ringrun_init() of the process.
std::vector<std::unique_ptr<Engine>>& stopped_engines() {
  static std::vector<std::unique_ptr<Engine>> engines;
  return engines;
}
std::atomic<std::uint64_t> g_synchronous_calls{0};  // names the synchronous calls routed through the engine

core::Communicator& require_communicator(const char* what) {
  core::Communicator* comm = core::process_communicator();
  if (!comm) throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("{}: ringrun_init() has not been called", what));
  return *comm;
}

// With process_mutex() held.
Engine& process_engine(const char* what) {
  core::Communicator& comm = require_communicator(what);
  auto& engine = engine_slot();
  if (!engine) {
    EngineConfig config = EngineConfig::from_environment();
    if (ringrun_elastic_enabled() == 1) config.elastic_epoch = ringrun_epoch();
    engine = std::make_unique<Engine>(comm, std::move(config));
    g_running.store(engine.get(), std::memory_order_release);
  }
  return *engine;
}

// The names synchronous calls rotate through while the engine runs ("ringrun_allreduce#3"),
// formatted once per process: formatting one per call cost about a quarter of a routed small
// allreduce's bookkeeping.
const std::string& routed_name(core::Collective kind, std::size_t k) {
  static const auto names = [] {
    std::array<std::array<std::string, kRoutedNamesPerCall>, core::kMaxCollective + 1> table;  // by kind
    for (const core::CollectiveRow& row : core::kCollectives)
      for (std::size_t i = 0; i < kRoutedNamesPerCall; ++i)
        table[static_cast<std::size_t>(row.kind)][i] = fmt::format("ringrun_{}#{}", row.name, i);
    return table;
  }();
  return names[static_cast<std::size_t>(kind)][k];
}

int submit_async(const char* what, const char* name, OpRequest&& request, ringrun_handle* out, int process_set = 0) {
  try {
    if (!out && !request.on_done)
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("{}: the handle pointer is null", what));
    if (out) *out = nullptr;
    if (name) {
      request.name = name;
    } else if (request.on_done) {
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("{}: an op with a callback needs a name", what));
    } else {
      // The synchronous calls' rotation (routed_name): for a caller that waits for the op before
      // it submits more than kRoutedNamesPerCall others without a name.
      const std::uint64_t call = routed_calls_of_set(process_set).fetch_add(1, std::memory_order_relaxed);
      request.name = routed_name(request.kind, call % kRoutedNamesPerCall);
      request.routed = true;
    }
    Engine* engine = process_set == 0 ? g_running.load(std::memory_order_acquire) : &engine_of_set(process_set, what);
    if (!engine) {
      std::lock_guard lock(core::process_mutex());
      engine = &process_engine(what);
    }
    const bool callback = request.on_done != nullptr;
    OpRef held = engine->submit(std::move(request));
    if (callback)
      (void)held.release();  // the callback stands for this hold, and may have let go already (OpState::run_callback)
    else
      *out = to_handle(std::move(held));
    core::clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return core::record_error(std::current_exception());
  }
}

using core::Collective;

// The elements of one row of the first dimension: the product of the dimensions after it (1
// without a shape or with one dimension). Not count / shape[0]: a rank with no rows must still
// count the rows the others send it.
std::size_t row_elements(const ringrun_request& r) {
  std::size_t row = 1;
  for (int d = 1; r.shape && d < r.ndim; ++d) row *= static_cast<std::size_t>(std::max<std::int64_t>(r.shape[d], 0));
  return row;
}

// Both enums are made from the one list (RINGRUN_COLLECTIVES): a listed value is the same kind.
Collective collective_of(ringrun_collective c) {
  if (c == RINGRUN_COLLECTIVE_JOIN) return Collective::barrier;  // OpRequest::join marks it
  if (const core::CollectiveRow* row = core::find_collective(static_cast<unsigned>(c))) return row->kind;
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("ringrun_submit: unknown collective {}", static_cast<int>(c)));
}

OpRequest request_from(const ringrun_request& r) {
  OpRequest request;
  request.kind = collective_of(r.collective);
  request.send = request.kind == Collective::broadcast ? r.recv : r.send;
  request.recv = r.recv;
  request.count = r.count;
  request.dtype = r.dtype;
  request.op = r.op;
  request.root = r.root;
  request.dims = Dims::of(r.shape, r.ndim);
  if (r.collective == RINGRUN_COLLECTIVE_JOIN) {
    if (r.process_set != 0)
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_submit: join runs over every rank (process set 0)");
    request.join = true;
    request.cacheable = false;
  }
  request.on_done = r.on_done;
  request.on_done_arg = r.on_done_arg;
  const std::size_t row = row_elements(r);
  if (row == 0 && (request.kind == Collective::alltoall || (request.kind == Collective::allgather && r.allocate)))
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("tensor '{}': its rows have no elements (a dimension after the first is 0), so the "
                                   "rows each rank sends cannot be counted; give those dimensions at least 1",
                                   r.name ? r.name : ""));
  if (request.kind == Collective::alltoall) {
    const int size = ringrun_process_set_size(r.process_set);  // the ranks the splits are for
    if (size < 0) throw RuntimeError(size, ringrun_last_error());
    if (r.splits) {
      request.to_each.assign(r.splits, r.splits + size);
      for (auto& rows : request.to_each) rows *= row;
    } else {
      const std::size_t rows = r.count / row;
      if (rows % static_cast<std::size_t>(size))
        throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                           fmt::format("tensor '{}': alltoall without splits needs a first dimension ({}) that divides "
                                       "by the number of ranks ({}); pass splits",
                                       r.name ? r.name : "", rows, size));
      request.to_each.assign(static_cast<std::size_t>(size), rows / static_cast<std::size_t>(size) * row);
    }
  }
  if (r.allocate && (request.kind == Collective::allgather || request.kind == Collective::alltoall)) {
    request.varying = true;
    request.output = [allocate = r.allocate, arg = r.allocate_arg, row](std::size_t total, std::span<const std::size_t> from_each) {
      std::vector<std::size_t> rows(from_each.begin(), from_each.end());
      for (auto& n : rows) n /= row;
      return allocate(arg, total, rows.data(), static_cast<int>(rows.size()));
    };
  } else if (request.kind == Collective::alltoall) {
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_submit: an alltoall needs allocate (its output size)");
  }
  return request;
}

int finish(const OpState& state) {
  if (state.code() == RINGRUN_OK) {
    core::clear_error();
    return RINGRUN_OK;
  }
  return core::record_error(std::make_exception_ptr(RuntimeError(state.code(), state.message())));
}

}  // namespace

int synchronous_collective(const char* what, const OpRequest& request) {
  // A few names, reused in turn: after the first calls they are response-cache hits (one bit
  // each instead of a full description), and small allreduces then ride in the negotiation.
  // Every rank numbers its synchronous calls in the same order, so the names match; the
  // rotation only has to outlast the synchronous calls in flight at once (one per thread).
  auto submit_named = [&](Engine& engine) {
    OpRequest named = request;
    named.name = routed_name(request.kind, g_synchronous_calls.fetch_add(1, std::memory_order_relaxed) % kRoutedNamesPerCall);
    named.routed = true;
    return engine.submit(std::move(named));
  };
  try {
    OpRef state;
    if (Engine* running = g_running.load(std::memory_order_acquire)) {
      state = submit_named(*running);
    } else {
      std::lock_guard lock(core::process_mutex());
      core::Communicator& comm = require_communicator(what);
      auto& engine = engine_slot();
      if (!engine) {
        switch (request.kind) {
          case core::Collective::allreduce:
            comm.allreduce(request.send, request.recv, request.count, request.dtype, request.op);
            break;
          case core::Collective::broadcast: comm.broadcast(request.recv, request.count, request.dtype, request.root); break;
          case core::Collective::allgather: comm.allgather(request.send, request.count, request.dtype, request.recv); break;
          case core::Collective::barrier: comm.barrier(); break;
          default:  // the collectives with no synchronous C function of their own
            throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("{}: submit it with ringrun_submit", what));
        }
        core::clear_error();
        return RINGRUN_OK;
      }
      state = submit_named(*engine);  // it started since the look above
    }
    state->wait();
    return finish(*state);
  } catch (...) {
    return core::record_error(std::current_exception());
  }
}

void start_process_engine() { process_engine("ringrun_init"); }

Engine& world_engine(const char* what) {
  if (Engine* running = g_running.load(std::memory_order_acquire)) return *running;
  std::lock_guard lock(core::process_mutex());
  return process_engine(what);
}

std::atomic<std::uint64_t>& world_routed_calls() { return g_synchronous_calls; }

void shutdown_process_engine() noexcept {
  auto& engine = engine_slot();
  if (!engine) return;
  g_running.store(nullptr, std::memory_order_release);
  engine->shutdown();
  try {
    stopped_engines().push_back(std::move(engine));
  } catch (...) {
    engine.reset();  // out of memory: freed after all (a racing submission is the program's error)
  }
  g_synchronous_calls.store(0, std::memory_order_relaxed);
}

}  // namespace ringrun::engine

using ringrun::engine::OpRequest;
using ringrun::core::Collective;

extern "C" {

int ringrun_allreduce_async(const char* name, const void* send, void* recv, size_t count, ringrun_dtype dtype,
                            ringrun_op op, ringrun_handle* out) {
  auto request = OpRequest::plain(Collective::allreduce, send, recv, count, dtype);
  request.op = op;
  return ringrun::engine::submit_async("ringrun_allreduce_async", name, std::move(request), out);
}

int ringrun_broadcast_async(const char* name, void* buf, size_t count, ringrun_dtype dtype, int root,
                            ringrun_handle* out) {
  auto request = OpRequest::plain(Collective::broadcast, buf, buf, count, dtype);
  request.root = root;
  return ringrun::engine::submit_async("ringrun_broadcast_async", name, std::move(request), out);
}

int ringrun_allgather_async(const char* name, const void* send, size_t count, ringrun_dtype dtype, void* recv,
                            ringrun_handle* out) {
  auto request = OpRequest::plain(Collective::allgather, send, recv, count, dtype);
  return ringrun::engine::submit_async("ringrun_allgather_async", name, std::move(request), out);
}

int ringrun_wait(ringrun_handle handle) {
  if (!handle)
    return ringrun::core::record_error(std::make_exception_ptr(
        ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_wait: the handle is null")));
  const ringrun::engine::OpRef owned = ringrun::engine::OpRef::adopt(&from_handle(handle));
  owned->wait();
  return ringrun::engine::finish(*owned);
}

int ringrun_wait_for(ringrun_handle handle, int timeout_ms, int* done) {
  if (!handle || !done || timeout_ms < 0)
    return ringrun::core::record_error(std::make_exception_ptr(ringrun::RuntimeError(
        RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_wait_for: the handle or done pointer is null, or the timeout negative")));
  ringrun::engine::OpState& state = from_handle(handle);
  *done = 0;
  if (!state.wait_until(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms))) {
    ringrun::core::clear_error();
    return RINGRUN_OK;
  }
  *done = 1;
  const ringrun::engine::OpRef owned = ringrun::engine::OpRef::adopt(&state);
  return ringrun::engine::finish(*owned);
}

void ringrun_request_init(ringrun_request* request) {
  if (!request) return;
  *request = ringrun_request{};
  request->collective = RINGRUN_COLLECTIVE_ALLREDUCE;
  request->dtype = RINGRUN_FLOAT32;
  request->op = RINGRUN_SUM;
}

int ringrun_submit(const ringrun_request* r, ringrun_handle* out) {
  try {
    if (!r) throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_submit: the request is null");
    OpRequest request = ringrun::engine::request_from(*r);
    const char* name = r->collective == RINGRUN_COLLECTIVE_JOIN ? "ringrun.join" : r->name;
    return ringrun::engine::submit_async("ringrun_submit", name, std::move(request), out, r->process_set);
  } catch (...) {
    return ringrun::core::record_error(std::current_exception());
  }
}

int ringrun_start_timeline(const char* filename, int mark_cycles) {
  try {
    if (!filename) throw ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_start_timeline: the file name is null");
    ringrun::engine::world_engine("ringrun_start_timeline").start_timeline(filename, mark_cycles != 0);
    ringrun::core::clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return ringrun::core::record_error(std::current_exception());
  }
}

int ringrun_stop_timeline(void) {
  try {
    ringrun::engine::world_engine("ringrun_stop_timeline").stop_timeline();
    ringrun::core::clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return ringrun::core::record_error(std::current_exception());
  }
}

int ringrun_test(ringrun_handle handle, int* done) {
  if (!handle || !done)
    return ringrun::core::record_error(std::make_exception_ptr(
        ringrun::RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "ringrun_test: the handle or done pointer is null")));
  *done = from_handle(handle).done() ? 1 : 0;
  ringrun::core::clear_error();
  return RINGRUN_OK;
}

}  // extern "C"
