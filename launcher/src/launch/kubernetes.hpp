// Kubernetes pods at the launch's edge (README, On Kubernetes): the contract's files, DNS and the
// per-pod store; what the contracts mean is ringrun/kubernetes.hpp's (pure).
#pragma once

#include <ringrun/cli.hpp>
#include <ringrun/kubernetes.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// The job's contract when neither flags (-H, --hostfile, --jobid) nor a SLURM allocation name
// the hosts: an MPIJob launcher pod's or a per-pod job's.
struct PodJob {
  std::optional<MpiJobContract> mpijob;
  std::optional<PodContract> pod;
};
PodJob pod_job(const Invocation& inv, const Environment& env);

// The MPIJob's hostfile read and parsed (InputError naming the file when unreadable or bad).
Allocation read_mpijob_hostfile(const MpiJobContract& contract);

// What the contract fills in that the flags left: in an MPIJob with --min-np/--max-np and no
// script, discover_hosts.sh beside the hostfile as the discovery script, printing no slots, so the
// hostfile's apply; its hosts reached by mpirun.
Invocation with_contract_defaults(const Invocation& inv, const PodJob& job, const Allocation& hostfile);

// "MPIJob hostfile /etc/mpi/hostfile (K_MPI_JOB_ROLE=launcher): 3 hosts x 2 slots", for --dry-run,
// --verbose and doctor.
std::string describe_mpijob(const MpiJobContract& contract, const Allocation& hostfile);

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
