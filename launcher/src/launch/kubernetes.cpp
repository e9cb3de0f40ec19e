// Kubernetes pods at the launch's edge (launch/kubernetes.hpp).
#include "launch/kubernetes.hpp"

#include "supervisor/parts.hpp"

#include <ringrun/variable_read.hpp>
#include <ringrun/slurm.hpp>
#include <ringrun/store.hpp>

#include <fmt/format.h>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ringrun {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps until `until`; throws LaunchError (128+signal) for SIGINT, SIGTERM or SIGHUP: nothing
// has started.
void pause_until(Clock::time_point until, std::string_view waiting_for) {
  if (const int sig = stop_signal_before(until))
    throw LaunchError(fmt::format("ringrun: SIG{} while waiting for {}; no process started",
                                  ::sigabbrev_np(sig) ? ::sigabbrev_np(sig) : "?", waiting_for),
                      128 + sig);
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

Invocation with_contract_defaults(const Invocation& inv, const PodJob& job, const Allocation& hostfile) {
  Invocation out = inv;
  if (!job.mpijob || !inv.elastic.enabled() || inv.elastic.discovery_script) return out;
  out.elastic.discovery_script = job.mpijob->discovery_script;
  // The script prints names only: a host it adds has the hostfile's slots (the operator's
  // slotsPerWorker, the same on every worker).
  if (!out.elastic.slots_per_host)
    out.elastic.slots_per_host = hostfile.hosts.empty() ? job.mpijob->default_slots : hostfile.hosts.front().slots;
  if (out.launch.launcher == LauncherKind::automatic) out.launch.launcher = LauncherKind::mpirun;
  out.notes.push_back(fmt::format("ringrun: elastic: the MPIJob's {} is the discovery script, {} slots a host",
                                  job.mpijob->discovery_script, *out.elastic.slots_per_host));
  return out;
}

void wait_for_dns(const std::vector<std::string>& hosts, const std::string& origin, double timeout_s) {
  const Clock::time_point give_up = after(timeout_s);
  std::vector<std::string> missing = hosts;
  bool told = false;
  for (;;) {
    std::erase_if(missing, host_resolves);
    if (missing.empty()) return;
    if (Clock::now() >= give_up) {
      std::string list;
      for (std::size_t i = 0; i < missing.size(); ++i) list += fmt::format("{}'{}'", i ? ", " : "", missing[i]);
      throw LaunchError(fmt::format("ringrun: {} : host{} {} did not resolve within {} s (--start-timeout); is "
                                    "the worker pod running, and its name the one the hostfile has?",
                                    origin, missing.size() > 1 ? "s" : "", list, timeout_s),
                        1);
    }
    if (!told) {
      std::fprintf(stderr, "ringrun: waiting up to %g s (--start-timeout) for %zu host%s of %s to resolve\n",
                   timeout_s, missing.size(), missing.size() == 1 ? "" : "s", origin.c_str());
      told = true;
    }
    pause_until(std::min(give_up, after(0.25)), "the hosts' DNS records");
  }
}

int pod_ranks(const PodContract& contract, int usable_gpus) {
  if (contract.nproc_per_node) return *contract.nproc_per_node;
  if (usable_gpus > 0) return usable_gpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

std::string pod_job_secret(const PodContract& contract, const Environment& env) {
  if (const auto given = variables::read_set(variables::kJobSecret, &env)) {
    const std::string& s = *given;
    if (s.size() != 64 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw InputError(fmt::format("{} : a per-pod job's secret must be 64 lowercase hex digits (e.g. from "
                                   "`openssl rand -hex 32` in a Kubernetes Secret)",
                                   variables::kJobSecret.name));
    return s;
  }
  const std::string job = fmt::format("{}:{}/{}", contract.master_addr, contract.master_port, contract.nnodes);
  std::string hex;
  for (int i = 0; i < 4; ++i) hex += fmt::format("{:016x}", std::hash<std::string>{}(fmt::format("{}#{}", job, i)));
  return hex;
}

void wait_for_pod_store(const PodContract& contract, const std::string& secret, double timeout_s) {
  const Clock::time_point give_up = after(timeout_s);
  const std::string where = fmt::format("{}:{}", contract.master_addr, contract.master_port);
  std::string last = "no answer";
  for (;;) {
    if (host_resolves(contract.master_addr)) {
      try {
        store::Client probe(contract.master_addr, static_cast<std::uint16_t>(contract.master_port), secret,
                            std::chrono::milliseconds(500));
        return;
      } catch (const std::exception& e) {
        last = e.what();
      }
    } else {
      last = "its name does not resolve yet";
    }
    if (Clock::now() >= give_up)
      throw LaunchError(fmt::format("ringrun: pod {} of {}: pod 0's store at {} (PET_MASTER_ADDR:PET_MASTER_PORT) did "
                                    "not answer within {} s (--start-timeout): {}",
                                    contract.node_rank, contract.nnodes, where, timeout_s, last),
                        1);
    pause_until(std::min(give_up, after(0.25)), fmt::format("pod 0's store at {}", where));
  }
}

}  // namespace ringrun
