// Runs n ranks as threads in this process, each with its own Communicator over loopback TCP (and
// shared memory when the ranks claim one host), exchanging addresses through an in-process store.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "comm/communicator.hpp"
#include "ringrun/store.hpp"

namespace ringrun::test {

enum class Placement { one_host, separate_hosts };

inline const char* placement_name(Placement p) { return p == Placement::one_host ? "one host (shm)" : "separate hosts (tcp)"; }

// Host names for n ranks: all on "node", or each on its own.
inline std::vector<std::string> hosts_for(int n, Placement placement) {
  std::vector<std::string> hosts;
  for (int rank = 0; rank < n; ++rank)
    hosts.push_back(placement == Placement::one_host ? "node" : "node" + std::to_string(rank));
  return hosts;
}

// Host names for ranks in block order: ranks_per_host[h] ranks on host "node<h>".
inline std::vector<std::string> hosts_of_blocks(const std::vector<int>& ranks_per_host) {
  std::vector<std::string> hosts;
  for (std::size_t h = 0; h < ranks_per_host.size(); ++h)
    for (int i = 0; i < ranks_per_host[h]; ++i) hosts.push_back("node" + std::to_string(h));
  return hosts;
}

struct RankOptions {
  std::size_t shm_slot_bytes = 0;  // 0: the transport's default
  int tcp_streams = 1;
  std::function<int(int rank)> tcp_streams_of = {};  // when set: each rank's own count instead
};

// Creates one communicator per entry of hosts (rank r claims host hosts[r]; collectively, one
// thread per rank), then runs body(rank, comm) on those threads. Rethrows the first exception a
// rank threw.
inline void run_ranks_on(const std::vector<std::string>& hosts,
                         const std::function<void(int, core::Communicator&)>& body, RankOptions options = {}) {
  const int n = static_cast<int>(hosts.size());
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
        config.hostname = hosts[rank];
        config.timeout = std::chrono::seconds(20);
        config.exchange = &exchange;
        config.shm_slot_bytes = options.shm_slot_bytes;
        config.tcp_streams = options.tcp_streams_of ? options.tcp_streams_of(rank) : options.tcp_streams;
        auto comm = core::Communicator::create(config);
        body(rank, *comm);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d of %d threw: %s\n", rank, n, e.what());  // the root cause may be on any rank
        errors[rank] = std::current_exception();
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// n ranks on one host or on n hosts.
inline void run_ranks(int n, Placement placement, const std::function<void(int, core::Communicator&)>& body,
                      std::size_t shm_slot_bytes = 0) {
  run_ranks_on(hosts_for(n, placement), body, {.shm_slot_bytes = shm_slot_bytes});
}

}  // namespace ringrun::test
