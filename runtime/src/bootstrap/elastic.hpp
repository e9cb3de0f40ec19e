// Elastic mode's side of the runtime (ringrun(3), Elastic mode): a process started by `ringrun
// --min-np/--max-np` takes its rank and size from the worlds the launcher publishes in the job's
// store (ringrun/elastic_wire.hpp), not from RINGRUN_RANK/SIZE. ElasticControl holds what lasts for
// the life of the process: its id, the epoch of the world it is in, and a control connection to the
// store for reset and leave requests and status reads. Joining a world gives a Bootstrap, as
// bootstrap_from_environment() does outside elastic mode.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "bootstrap/bootstrap.hpp"

namespace ringrun::store {
class Client;
}

namespace ringrun::core {

struct ElasticSettings {
  std::uint64_t id = 0;                       // RINGRUN_ELASTIC_ID
  int start_epoch = 0;                        // RINGRUN_ELASTIC_EPOCH
  std::chrono::milliseconds timeout = default_seconds(variables::kElasticTimeout);  // world and address waits
  std::chrono::milliseconds start_timeout = default_seconds(variables::kStartTimeout);  // connects
  std::string store_address;                  // RINGRUN_STORE_ADDR, host:port
  std::string secret;                         // RINGRUN_JOB_SECRET
};

// True when RINGRUN_ELASTIC_ID is set (the other variables are checked by elastic_settings).
bool elastic_requested();

// The elastic variables; RuntimeError (RINGRUN_ERR_BOOTSTRAP) naming the variable that is
// missing or malformed.
ElasticSettings elastic_settings_from_environment();

struct ElasticStatus {
  int latest_epoch = 0;  // the newest published world
  bool added = false;    // a world after ours, up to that one, added processes
};

class ElasticControl {
 public:
  // Connects the control connection; RuntimeError (RINGRUN_ERR_BOOTSTRAP) when the store is
  // unreachable or refuses the secret.
  explicit ElasticControl(ElasticSettings settings);
  ~ElasticControl();
  ElasticControl(const ElasticControl&) = delete;
  ElasticControl& operator=(const ElasticControl&) = delete;

  const ElasticSettings& settings() const { return settings_; }
  std::uint64_t id() const { return settings_.id; }
  // The world this process is in, or last tried to join.
  int epoch() const { return epoch_.load(std::memory_order_relaxed); }

  // Waits (up to the elastic timeout) for world `epoch`, moves on to the newest published world
  // when that is newer, and returns this process's bootstrap in it (its exchange under the
  // world's address prefix). RuntimeError: RINGRUN_ERR_REMOVED when this id is not a member or
  // the job ended, RINGRUN_ERR_TIMEOUT when no world came, RINGRUN_ERR_BOOTSTRAP for the store.
  Bootstrap join(int epoch);

  // The newest published epoch, or -1 when none is yet. Thread-safe, like the calls below.
  int latest_epoch();
  void post_reset();  // "<epoch>/reset" = id: this process leaves the current world
  void post_leave();  // "leave/<id>" = 1: it leaves the job at its next reset
  void post_failure();  // "failed/<id>" = 1: it is about to fail
  ElasticStatus status();

 private:
  std::unique_ptr<store::Client> connect(const char* what) const;
  template <typename Body> auto with_control(const char* what, Body&& body);

  ElasticSettings settings_;
  std::mutex mutex_;  // the control connection serves one request at a time
  std::unique_ptr<store::Client> control_;
  std::atomic<int> epoch_;
};

}  // namespace ringrun::core
