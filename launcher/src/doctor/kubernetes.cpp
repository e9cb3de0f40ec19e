// doctor in a Kubernetes job's pod (README, On Kubernetes): pure checks of what probe.cpp found.
#include "doctor/checks.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ringrun::diagnostics {
namespace {

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::vector<Check> check_mpijob(const PodJobFacts& f) {
  std::vector<Check> checks;
  checks.push_back(pass("mpijob hostfile", f.mpijob));
  const auto [low, high] = std::minmax_element(f.slots.begin(), f.slots.end());
  if (low != f.slots.end() && *low != *high)
    checks.back() = warn("mpijob hostfile", f.mpijob,
                         "the workers offer different slots; ranks fill them in order, so a host with fewer GPUs "
                         "than slots gets ranks without one: give every worker slotsPerWorker GPUs");
  if (f.unresolved.empty())
    checks.push_back(pass("mpijob dns", fmt::format("all {} resolve", plural(f.slots.size(), "host", "hosts"))));
  else
    checks.push_back(fail("mpijob dns", fmt::format("{} of {} do not resolve: {}", f.unresolved.size(),
                                                    plural(f.slots.size(), "host", "hosts"), join(f.unresolved)),
                          "a worker's DNS record appears once its pod is Running and ready: see kubectl get pods; "
                          "ringrun waits for them up to --start-timeout"));
  if (f.ssh_checked == 0) return checks;
  const std::string tried = f.ssh_checked < f.slots.size()
                                ? fmt::format("the first {} of {}", f.ssh_checked, plural(f.slots.size(), "host", "hosts"))
                                : fmt::format("all {}", plural(f.ssh_checked, "host", "hosts"));
  if (f.ssh_failures.empty())
    checks.push_back(pass("mpijob ssh", fmt::format("ssh reaches {} (BatchMode)", tried)));
  else
    checks.push_back(fail("mpijob ssh", fmt::format("ssh failed on {} of {}: {}", f.ssh_failures.size(), tried,
                                                    join(f.ssh_failures, "; ")),
                          "mpirun reaches the workers by ssh: the operator's key must be at /root/.ssh "
                          "(sshAuthMountPath) and sshd must run in each worker"));
  return checks;
}

}  // namespace

std::vector<Check> check_pod_job(const PodJobFacts& f) {
  if (!f.error.empty())
    return {fail("kubernetes job", f.error, "fix the value it names; the job's pods all read the same contract")};
  if (!f.mpijob.empty()) return check_mpijob(f);
  std::vector<Check> checks = {pass("pod job", f.pod)};
  if (f.master_resolves)
    checks.push_back(pass("pod job store", fmt::format("PET_MASTER_ADDR {} resolves", f.master_addr)));
  else
    checks.push_back(warn("pod job store", fmt::format("PET_MASTER_ADDR {} does not resolve (yet)", f.master_addr),
                          "pod 0's name resolves once it is ready; ringrun waits for it up to --start-timeout"));
  return checks;
}

}  // namespace ringrun::diagnostics
