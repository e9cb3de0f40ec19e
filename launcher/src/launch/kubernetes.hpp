// Kubernetes pods at the launch's edge (README, On Kubernetes): what the contract fills in, the
// waits for DNS and for pod 0's store, the per-pod secret; what the contracts mean is
// ringrun/kubernetes.hpp's (pure), the pod's files are facts/pod_job.hpp's.
#pragma once

#include "facts/pod_job.hpp"

#include <ringrun/cli.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// What the contract fills in that the flags left: in an MPIJob with --min-np/--max-np and no
// script, discover_hosts.sh beside the hostfile as the discovery script, printing no slots, so the
// hostfile's apply; its hosts reached by mpirun.
Invocation with_contract_defaults(const Invocation& inv, const PodJob& job, const Allocation& hostfile);

// Waits until every host of `hosts` resolves, polling DNS, at most `timeout_s`: a pod's record
// appears only once the pod is ready. Throws LaunchError (exit 1) naming the hosts that never
// resolved and `origin`, or 128+signal for SIGINT/SIGTERM/SIGHUP.
void wait_for_dns(const std::vector<std::string>& hosts, const std::string& origin, double timeout_s);

// A per-pod job's ranks per pod: PET_NPROC_PER_NODE, else ("auto") this pod's usable GPUs, else
// the CPUs it may run on.
int pod_ranks(const PodContract& contract, int usable_gpus);

// The secret every pod presents to pod 0's store: RINGRUN_JOB_SECRET when the pods are given one
// (from a Kubernetes Secret), else one derived from the job's PET_* values, which keeps apart
// jobs, not people (README, On Kubernetes).
std::string pod_job_secret(const PodContract& contract, const Environment& env);

// Pods other than 0: waits until pod 0's store answers with `secret`, at most `timeout_s`; its DNS
// name may not resolve yet. Throws LaunchError (exit 1: a restart may find it) or 128+signal.
void wait_for_pod_store(const PodContract& contract, const std::string& secret, double timeout_s);

}  // namespace ringrun
