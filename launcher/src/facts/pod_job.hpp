// A Kubernetes pod's job contract as this pod has it (README, On Kubernetes): the files and DNS
// behind ringrun/kubernetes.hpp's pure readers, for the launch and for doctor.
#pragma once

#include <ringrun/kubernetes.hpp>

#include <optional>
#include <string>

namespace ringrun {

// The job's contract: an MPIJob launcher pod's or a per-pod job's; neither when `hosts_named`
// (-H, --hostfile, --jobid) or inside a SLURM allocation.
struct PodJob {
  std::optional<MpiJobContract> mpijob;
  std::optional<PodContract> pod;
};
PodJob pod_job(const Environment& env, bool hosts_named);

// The MPIJob's hostfile read and parsed (InputError naming the file when unreadable or bad).
Allocation read_mpijob_hostfile(const MpiJobContract& contract);

// Whether `host` has an address now (getaddrinfo: /etc/hosts, then DNS).
bool host_resolves(const std::string& host);

}  // namespace ringrun
