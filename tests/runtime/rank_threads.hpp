// Runs n ranks as threads in this process, each with its own Communicator over loopback TCP (and
// shared memory when the ranks claim one host), exchanging addresses through an in-process store.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/communicator.hpp"
#include "ringrun/store.hpp"

namespace ringrun::test {

enum class Placement { one_host, separate_hosts };

inline const char* placement_name(Placement p) { return p == Placement::one_host ? "one host (shm)" : "separate hosts (tcp)"; }

// Creates n communicators (collectively, one thread per rank), then runs body(rank, comm) on n
// threads. Rethrows the first exception a rank threw.
inline void run_ranks(int n, Placement placement, const std::function<void(int, core::Communicator&)>& body,
                      std::size_t shm_slot_bytes = 0) {
  static int group = 0;
  const std::string secret(64, 's');
  store::Server server("127.0.0.1", 0, secret);
  std::string prefix = "test" + std::to_string(group++);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto client = std::make_unique<store::Client>("127.0.0.1", server.port(), secret);
        core::StoreExchange exchange(std::move(client), prefix, rank, n, std::chrono::seconds(20));
        core::CommunicatorConfig config;
        config.rank = rank;
        config.size = n;
        config.hostname = placement == Placement::one_host ? "node" : "node" + std::to_string(rank);
        config.timeout = std::chrono::seconds(20);
        config.exchange = &exchange;
        config.shm_slot_bytes = shm_slot_bytes;
        auto comm = core::Communicator::create(config);
        body(rank, *comm);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace ringrun::test
