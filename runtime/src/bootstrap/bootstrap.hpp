// Bootstrap: who am I (rank, size, host) and how do ranks exchange their addresses. Sources, in
// order: ringrun's environment (RINGRUN_* + the store ringrun hosts), Open MPI's mpirun
// (OMPI_COMM_WORLD_*), PMIx (PMIX_RANK), srun (SLURM_PROCID), PMI (PMI_RANK); no variables at all
// means a single rank. Address exchange: ringrun's store; else PMIx when a PMIx server is there
// (PMIX_NAMESPACE); else a store hosted by rank 0 at MASTER_ADDR:MASTER_PORT.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/env.hpp"

namespace ringrun::store {
class Client;
class Server;
}  // namespace ringrun::store

namespace ringrun::core {

// The check a rendezvous through the store calls about every 100 ms while it waits for other
// ranks (ringrun_set_interrupt_check, ringrun(3)); non-zero gives up. Null: wait without one.
using InterruptCheck = int (*)(void* arg);
void set_interrupt_check(InterruptCheck check, void* arg);

// An all-gather of one small record per rank, used once per communicator at start-up.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual std::string name() const = 0;
  // Publishes mine for this rank; returns every rank's record in rank order. Throws RuntimeError
  // (RINGRUN_ERR_TIMEOUT) naming the ranks that never published within the timeout,
  // (RINGRUN_ERR_RESET) when a rank's record is the elastic launcher's tombstone, or
  // (RINGRUN_ERR_BOOTSTRAP) when the interrupt check gave up.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // The IPv4 address through which this host reaches the others, when the exchange knows one.
  virtual std::string local_address_hint() const { return ""; }
};

// Through a rendezvous store; keys are "<prefix>/<rank>". If hosted is given (rank 0 serving the
// store itself), it is kept alive as long as this exchange.
class StoreExchange final : public Exchange {
 public:
  StoreExchange(std::unique_ptr<store::Client> client, std::string prefix, int rank, int size,
                std::chrono::milliseconds timeout, std::unique_ptr<store::Server> hosted = nullptr);
  ~StoreExchange() override;
  std::string name() const override;
  std::vector<std::string> allgather(const std::string& mine) override;
  std::string local_address_hint() const override;

 private:
  std::unique_ptr<store::Server> hosted_;
  std::unique_ptr<store::Client> client_;
  std::string prefix_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int round_ = 0;
};

struct Bootstrap {
  int rank = 0;
  int size = 1;
  std::string hostname;
  std::string listen_address;  // IPv4 this rank listens on and advertises
  std::chrono::milliseconds timeout = core::default_seconds(variables::kStartTimeout);
  std::unique_ptr<Exchange> exchange;  // null when size == 1
  std::string source;                  // "ringrun", "mpirun (PMIx)", ... for messages
};

// Reads the environment (ringrun/environment_variables.hpp) and sets up the exchange. Throws RuntimeError
// (RINGRUN_ERR_BOOTSTRAP) with the variable or server at fault.
Bootstrap bootstrap_from_environment();

// This host's name for same-host detection: RINGRUN_HOSTNAME, else gethostname().
std::string this_hostname();

// The IPv4 address of a network interface by name; RuntimeError when it has none.
std::string interface_address(const std::string& interface);

}  // namespace ringrun::core
