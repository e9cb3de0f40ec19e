// Elastic mode's part of the C API (ringrun.h): ringrun_reset, ringrun_epoch,
// ringrun_elastic_enabled, ringrun_elastic_status, ringrun_elastic_leave, ringrun_elastic_fail, and the join that
// ringrun_init makes in elastic mode. The process's ElasticControl lives here from ringrun_init to
// ringrun_finalize; a reset keeps it.
#include <atomic>
#include <memory>

#include <fmt/format.h>

#include "bootstrap/elastic.hpp"
#include "api/process_runtime.hpp"
#include "ringrun/environment_variables.hpp"
#include "ringrun/ringrun.h"
#include "ringrun/runtime.hpp"

namespace ringrun::core {
namespace {

// Created and destroyed under process_mutex(); the pointer is also published for the calls that
// do not take process_mutex (a reset may hold it while it waits for the next world).
std::unique_ptr<ElasticControl> g_control;
std::atomic<ElasticControl*> g_control_view{nullptr};

ElasticControl& require_control(const char* what) {
  ElasticControl* control = g_control_view.load(std::memory_order_acquire);
  if (!control) {
    if (!elastic_requested())
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                         fmt::format("{}: this process is not in elastic mode ({} is not set: start the job with "
                                     "ringrun --min-np/--max-np)",
                                     what, variables::kElasticId.name));
    throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("{}: ringrun_init() has not been called", what));
  }
  return *control;
}

// Joins world `epoch` (or a newer one) and starts the runtime in it. When the world cannot form
// (a member died before publishing its address, or while connecting) and the launcher has
// published a newer world meanwhile, joins that one: each try is for a newer epoch, so this ends.
void join_and_start_locked(ElasticControl& control, int epoch, const char* what) {
  for (;;) {
    Bootstrap boot = control.join(epoch);
    const int joined = control.epoch();
    try {
      start_runtime_locked(std::move(boot), true, what);
      return;
    } catch (const RuntimeError& e) {
      const int latest = control.latest_epoch();
      if (latest > joined) {
        epoch = latest;
        continue;
      }
      // A member lost while the world formed: the launcher publishes another world; the caller
      // resets again to join it. Timeouts and bootstrap errors stay what they are.
      if (e.code() == RINGRUN_ERR_PEER)
        throw RuntimeError(RINGRUN_ERR_RESET, fmt::format("{} (elastic mode: world {} did not form; call "
                                                          "ringrun_reset() to join the next one)",
                                                          e.what(), joined));
      throw;  // RESET (a tombstone) says so itself
    }
  }
}

}  // namespace

void elastic_init_locked() {
  if (!g_control) {
    g_control = std::make_unique<ElasticControl>(elastic_settings_from_environment());
    g_control_view.store(g_control.get(), std::memory_order_release);
  }
  join_and_start_locked(*g_control, g_control->settings().start_epoch, "ringrun_init");
}

bool elastic_active_locked() { return g_control != nullptr; }

void elastic_release_locked() noexcept {
  g_control_view.store(nullptr, std::memory_order_release);
  g_control.reset();
}

}  // namespace ringrun::core

using namespace ringrun::core;

extern "C" {

int ringrun_reset(void) {
  try {
    std::lock_guard lock(process_mutex());
    ElasticControl& control = require_control("ringrun_reset");
    // The request first: when no member died, it is what makes the launcher publish a new world
    // for the others (whose engines this one's shutdown waits for) to reset into.
    control.post_reset();
    // No barrier: the peers may be dead. The abortive close wakes any peer still waiting on us.
    stop_runtime_locked(false);
    join_and_start_locked(control, control.epoch() + 1, "ringrun_reset");
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

int ringrun_epoch(void) {
  ElasticControl* control = g_control_view.load(std::memory_order_acquire);
  return control ? control->epoch() : 0;
}

int ringrun_elastic_enabled(void) { return elastic_requested() ? 1 : 0; }

int ringrun_elastic_status(int* latest_epoch, int* added) {
  try {
    ElasticStatus status = require_control("ringrun_elastic_status").status();
    if (latest_epoch) *latest_epoch = status.latest_epoch;
    if (added) *added = status.added ? 1 : 0;
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

int ringrun_elastic_leave(void) {
  try {
    require_control("ringrun_elastic_leave").post_leave();
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

int ringrun_elastic_fail(void) {
  try {
    require_control("ringrun_elastic_fail").post_failure();
    clear_error();
    return RINGRUN_OK;
  } catch (...) {
    return record_error(std::current_exception());
  }
}

}  // extern "C"
