#include "bootstrap/bootstrap.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include <fmt/format.h>

#include "core/env.hpp"
#include "core/world.hpp"
#include "ringrun/elastic_wire.hpp"
#include "ringrun/runtime.hpp"
#include "ringrun/store.hpp"

#ifdef RINGRUN_HAVE_PMIX
#include "bootstrap/pmix_library.hpp"
#endif

namespace ringrun::core {
namespace {

// Each ringrun_init in a process uses fresh keys, so a job may finalize and init again.
std::atomic<int> g_generation{0};

std::mutex g_interrupt_mutex;
InterruptCheck g_interrupt_check = nullptr;
void* g_interrupt_arg = nullptr;

// The installed check as a store wait takes it; empty when none is installed.
std::function<bool()> interrupt_check() {
  std::lock_guard lock(g_interrupt_mutex);
  if (!g_interrupt_check) return {};
  return [check = g_interrupt_check, arg = g_interrupt_arg] { return check(arg) != 0; };
}

}  // namespace

void set_interrupt_check(InterruptCheck check, void* arg) {
  std::lock_guard lock(g_interrupt_mutex);
  g_interrupt_check = check;
  g_interrupt_arg = arg;
}

StoreExchange::StoreExchange(std::unique_ptr<store::Client> client, std::string prefix, int rank, int size,
                             std::chrono::milliseconds timeout, std::unique_ptr<store::Server> hosted)
    : hosted_(std::move(hosted)), client_(std::move(client)), prefix_(std::move(prefix)), rank_(rank), size_(size),
      timeout_(timeout) {}

StoreExchange::~StoreExchange() = default;

std::string StoreExchange::name() const { return "the rendezvous store at " + client_->server(); }

std::string StoreExchange::local_address_hint() const {
  sockaddr_in address = client_->local_address();
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return text;
}

std::vector<std::string> StoreExchange::allgather(const std::string& mine) {
  std::string base = fmt::format("{}/{}/", prefix_, round_++);
  try {
    client_->set(base + std::to_string(rank_), mine);
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(base + std::to_string(r));
    std::vector<std::string> records = client_->wait(keys, timeout_, interrupt_check());
    // Elastic mode: the launcher marks the key of a member that died before publishing, so that
    // the others learn at once that this world will not form (a newer one follows).
    for (int r = 0; r < size_; ++r)
      if (records[static_cast<std::size_t>(r)] == store::elastic::kTombstone)
        throw RuntimeError(RINGRUN_ERR_RESET,
                           fmt::format("rendezvous: rank {} of {} left before publishing its address at {} (key "
                                       "'{}' holds the launcher's reset mark); call ringrun_reset() to join the "
                                       "next world",
                                       r, size_, name(), keys[static_cast<std::size_t>(r)]));
    return records;
  } catch (const store::StoreTimeout& e) {
    std::vector<int> missing;
    for (const auto& key : e.missing()) missing.push_back(std::stoi(key.substr(base.size())));
    throw RuntimeError(RINGRUN_ERR_TIMEOUT,
                       fmt::format("rendezvous: rank{} {} never arrived at {} within {} s (of {} ranks)",
                                   missing.size() > 1 ? "s" : "", rank_list(missing), name(),
                                   timeout_.count() / 1000.0, size_));
  } catch (const store::StoreInterrupted&) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("rendezvous: interrupted while waiting for the other ranks (of {}) at {}", size_, name()));
  } catch (const store::StoreError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("rendezvous: {}", e.what()));
  }
}

#ifdef RINGRUN_HAVE_PMIX
namespace {

// The process's PMIx client, connected by the first ringrun_init that meets through PMIx and
// disconnected only when the process exits (ringrun(3), DESCRIPTION), not at ringrun_finalize: a
// PMIx server (4.2) takes a client's disconnect for a departure, so a rank still disconnecting in
// its ringrun_finalize was dropped from the fence a faster rank's next ringrun_init had opened,
// which then ended without it (PMIX_ERR_PARTIAL_SUCCESS, or "published no address").
std::mutex g_pmix_mutex;
bool g_pmix_connected = false;
pid_t g_pmix_owner = 0;
pmix_proc_t g_pmix_self;

// At exit, from the process that connected: a child of fork() shares its socket but is no client.
void disconnect_pmix_at_exit() {
  std::lock_guard lock(g_pmix_mutex);
  if (g_pmix_connected && ::getpid() == g_pmix_owner) pmix_api().Finalize(nullptr, 0);
  g_pmix_connected = false;
}

const pmix_proc_t& pmix_client() {
  std::lock_guard lock(g_pmix_mutex);
  if (g_pmix_connected) return g_pmix_self;
  const PmixApi& pmix = pmix_api();
  pmix_status_t rc = pmix.Init(&g_pmix_self, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("PMIx_Init failed: {} (PMIX_NAMESPACE is set, but no PMIx server answered; {})",
                                   pmix.Error_string(rc), pmix.path));
  static bool registered = false;
  if (!registered) registered = std::atexit(disconnect_pmix_at_exit) == 0;
  g_pmix_connected = true;
  g_pmix_owner = ::getpid();
  return g_pmix_self;
}

// A pmix_info_t of `key` holding a value of `type` (a number: nothing to free), as PMIx 2 to 5 lay it out.
void set_info(pmix_info_t& info, const char* key, pmix_data_type_t type) {
  std::memset(static_cast<void*>(&info), 0, sizeof info);
  std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
  info.value.type = type;
}

// PMIX_VALUE_RELEASE without PMIx_Value_destruct (PMIx 4 and later only): PMIx_Get's value and
// the string in it come from malloc.
void release_value(pmix_value_t* value) {
  if (!value) return;
  if (value->type == PMIX_STRING) std::free(value->data.string);
  std::free(value);
}

class PmixExchange final : public Exchange {
 public:
  PmixExchange(int rank, int size, std::chrono::milliseconds timeout) : rank_(rank), size_(size), timeout_(timeout) {
    if (static_cast<int>(pmix_client().rank) != rank)
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("PMIx says this is rank {}, the environment says {}",
                                                            g_pmix_self.rank, rank));
  }
  ~PmixExchange() override = default;

  std::string name() const override { return fmt::format("PMIx namespace {}", g_pmix_self.nspace); }

  std::vector<std::string> allgather(const std::string& mine) override {
    const PmixApi& pmix = pmix_api();
    std::string key = fmt::format("ringrun.addr.{}.{}", generation_, round_++);
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = const_cast<char*>(mine.c_str());
    pmix_status_t rc = pmix.Put(PMIX_GLOBAL, key.c_str(), &value);  // copies the value
    if (rc == PMIX_SUCCESS) rc = pmix.Commit();
    if (rc != PMIX_SUCCESS)
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("PMIx_Put/Commit of {}: {}", key, pmix.Error_string(rc)));

    int seconds = static_cast<int>(std::max<long long>(1, timeout_.count() / 1000));
    pmix_proc_t everyone;
    PMIX_PROC_CONSTRUCT(&everyone);
    PMIX_LOAD_PROCID(&everyone, g_pmix_self.nspace, PMIX_RANK_WILDCARD);
    // Filled by hand rather than by PMIX_INFO_LOAD, which calls PMIx_Info_load (PMIx 4 and later
    // only): the host's PMIx may be older than the headers.
    pmix_info_t info[2];
    bool collect = true;
    set_info(info[0], PMIX_COLLECT_DATA, PMIX_BOOL);
    info[0].value.data.flag = collect;
    set_info(info[1], PMIX_TIMEOUT, PMIX_INT);
    info[1].value.data.integer = seconds;
    rc = pmix.Fence(&everyone, 1, info, 2);
    if (rc != PMIX_SUCCESS)
      throw RuntimeError(rc == PMIX_ERR_TIMEOUT ? RINGRUN_ERR_TIMEOUT : RINGRUN_ERR_BOOTSTRAP,
                         fmt::format("rendezvous: PMIx_Fence over {} ranks failed after up to {} s: {} (PMIx does "
                                     "not say which ranks never arrived; check every rank reached ringrun_init)",
                                     size_, seconds, pmix.Error_string(rc)));
    std::vector<std::string> all(size_);
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        all[r] = mine;
        continue;
      }
      pmix_proc_t peer;
      PMIX_PROC_CONSTRUCT(&peer);
      PMIX_LOAD_PROCID(&peer, g_pmix_self.nspace, static_cast<pmix_rank_t>(r));
      pmix_value_t* got = nullptr;
      pmix_info_t get_info;
      set_info(get_info, PMIX_TIMEOUT, PMIX_INT);
      get_info.value.data.integer = seconds;
      rc = pmix.Get(&peer, key.c_str(), &get_info, 1, &got);
      if (rc != PMIX_SUCCESS || got == nullptr || got->type != PMIX_STRING) {
        missing.push_back(r);
      } else {
        all[r] = got->data.string;
      }
      release_value(got);
    }
    if (!missing.empty())
      throw RuntimeError(RINGRUN_ERR_TIMEOUT, fmt::format("rendezvous: rank{} {} published no address through {}",
                                                          missing.size() > 1 ? "s" : "", rank_list(missing), name()));
    return all;
  }

 private:
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int generation_ = g_generation.load();
  int round_ = 0;
};

}  // namespace
#endif

std::string interface_address(const std::string& interface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("getifaddrs(): {}", std::strerror(errno)));
  std::string found;
  std::string names;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    if (names.find(it->ifa_name) == std::string::npos) names += (names.empty() ? "" : ", ") + std::string(it->ifa_name);
    if (interface == it->ifa_name && found.empty()) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
  }
  freeifaddrs(list);
  if (found.empty())
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("{}='{}': no such interface with an IPv4 address (interfaces with one: {})",
                                   variables::kNetworkInterface.name, interface, names));
  return found;
}

namespace {

struct Identity {
  int rank = 0, size = 1;
  std::string source;
};

std::optional<Identity> identity_from(const char* rank_var, const char* size_var, const char* source) {
  // Other launchers' variables, bounded as ringrun's own are.
  auto rank = env_int(rank_var, 0, static_cast<long long>(variables::kRank.max));
  if (!rank) return std::nullopt;
  auto size = env_int(size_var, 1, static_cast<long long>(variables::kSize.max));
  if (!size)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("{} is set but {} is not ({})", rank_var, size_var, source));
  if (*rank >= *size)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                       fmt::format("{}={} is not below {}={}", rank_var, *rank, size_var, *size));
  return Identity{static_cast<int>(*rank), static_cast<int>(*size), source};
}

Identity discover_identity() {
  // Open MPI before Slurm: an mpirun inside an allocation inherits the batch step's SLURM_PROCID.
  if (auto id = identity_from(variables::kRank.name, variables::kSize.name, "ringrun")) return *id;
  if (auto id = identity_from("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun")) return *id;
  if (env_string("PMIX_RANK")) {
    const char* size_var = env_string("SLURM_NTASKS") ? "SLURM_NTASKS" : "PMI_SIZE";
    if (auto id = identity_from("PMIX_RANK", size_var, "PMIx")) return *id;
  }
  if (auto id = identity_from("SLURM_PROCID", "SLURM_NTASKS", "srun")) return *id;
  if (auto id = identity_from("PMI_RANK", "PMI_SIZE", "PMI")) return *id;
  return Identity{0, 1, "no launcher"};
}

// Where rank 0 hosts the store for MASTER_ADDR: that address when it is one of this host's (so the
// store listens on the chosen interface only), else every interface.
std::string store_bind_address(const std::string& master_addr) {
  try {
    sockaddr_in address = net::resolve_ipv4(master_addr, 0);
    net::Fd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (probe && ::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
      return text;
    }
  } catch (const net::NetError&) {
    // Unresolvable here: the client's connect reports it.
  }
  return "0.0.0.0";
}

}  // namespace

std::string this_hostname() {
  if (auto name = env_text(variables::kHostname)) return *name;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

Bootstrap bootstrap_from_environment() {
  Bootstrap boot;
  Identity id = discover_identity();
  boot.rank = id.rank;
  boot.size = id.size;
  boot.source = id.source;
  boot.hostname = this_hostname();
  boot.timeout = env_seconds(variables::kStartTimeout);
  int generation = g_generation.fetch_add(1);
  auto interface = env_text(variables::kNetworkInterface);
  if (interface) boot.listen_address = interface_address(*interface);
  if (boot.size == 1) return boot;

  std::string secret = env_text(variables::kJobSecret).value_or("");
  try {
    if (auto store_address = env_text(variables::kStoreAddr)) {
      auto where = net::parse_host_port(*store_address);
      auto client = std::make_unique<store::Client>(where.host, where.port, secret, boot.timeout);
      boot.exchange = std::make_unique<StoreExchange>(std::move(client), fmt::format("ringrun/init{}", generation),
                                                      boot.rank, boot.size, boot.timeout);
      boot.source += " (store " + *store_address + ")";
    } else if (env_string("PMIX_NAMESPACE")) {
#ifdef RINGRUN_HAVE_PMIX
      boot.exchange = std::make_unique<PmixExchange>(boot.rank, boot.size, boot.timeout);
      boot.source += " (PMIx)";
#else
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                         "PMIX_NAMESPACE is set but this libringrun_runtime was built without PMIx; start the job "
                         "with ringrun or set MASTER_ADDR/MASTER_PORT");
#endif
    } else if (auto master = env_text(variables::kMasterAddr)) {
      // Both or neither: the table's port is the launcher's choice, not a guess for a hand-set address.
      auto port = env_set(variables::kMasterPort) ? env_integer(variables::kMasterPort) : std::nullopt;
      if (!port)
        throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("{} is set but {} is not", variables::kMasterAddr.name,
                                                              variables::kMasterPort.name));
      std::unique_ptr<store::Server> hosted;
      // Without ringrun there is no job secret unless the user exports one; both sides agree on "".
      if (boot.rank == 0)
        hosted = std::make_unique<store::Server>(store_bind_address(*master), static_cast<std::uint16_t>(*port), secret);
      auto client = std::make_unique<store::Client>(*master, static_cast<std::uint16_t>(*port), secret, boot.timeout);
      boot.exchange = std::make_unique<StoreExchange>(std::move(client), fmt::format("ringrun/init{}", generation),
                                                      boot.rank, boot.size, boot.timeout, std::move(hosted));
      boot.source += fmt::format(" (store hosted by rank 0 at {}:{})", *master, *port);
    } else {
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                         fmt::format("rank {} of {} (from {}) has no way to find its peers: start the job with "
                                     "ringrun, under a PMIx server, or set MASTER_ADDR and MASTER_PORT",
                                     boot.rank, boot.size, id.source));
    }
  } catch (const store::StoreError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, e.what());
  } catch (const net::NetError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("{}: {}", variables::kStoreAddr.name, e.what()));
  }
  if (boot.listen_address.empty()) boot.listen_address = boot.exchange->local_address_hint();
  if (boot.listen_address.empty()) {
    // PMIx gives no hint: loopback when every rank is on this host, else this host's address.
    auto local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, static_cast<long long>(variables::kSize.max));
    if (local_size && *local_size == boot.size) {
      boot.listen_address = "127.0.0.1";
    } else {
      sockaddr_in address = net::resolve_ipv4(boot.hostname, 0);
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
      boot.listen_address = text;
    }
  }
  return boot;
}

}  // namespace ringrun::core
