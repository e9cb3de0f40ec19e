// Kubernetes: the job contracts a pod is given (README, On Kubernetes). Pure: environment and
// text in, value out; reading the files and waiting for DNS are the launcher's.
//   - An MPIJob's launcher pod (Kubeflow MPI Operator, kubeflow.org/v2beta1): a hostfile the
//     operator mounts (/etc/mpi/hostfile) and names in the MPI's own variables, with the workers'
//     names and slots, and discover_hosts.sh beside it listing the workers that run now.
//   - A per-pod job (Kubeflow Trainer v2's torch runtime, JobSet, an Indexed Job): every pod runs
//     ringrun and starts its own ranks; torchrun's PET_* variables say how many pods there are,
//     which one this is and where pod 0 listens.
#pragma once

#include "ringrun/allocation.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ringrun {

// The operator's mount; the hostfile when K_MPI_JOB_ROLE=launcher and no variable names one.
inline constexpr std::string_view kMpiJobHostfile = "/etc/mpi/hostfile";

struct MpiJobContract {
  std::string hostfile;          // the hostfile's path
  std::string named_by;          // "OMPI_MCA_orte_default_hostfile=..." or "K_MPI_JOB_ROLE=launcher"
  int default_slots = 1;         // slots of a line that gives none
  std::string discovery_script;  // discover_hosts.sh beside the hostfile (elastic mode's script)
};

// The MPIJob launcher pod's contract; nullopt outside one. It is one when K_MPI_JOB_ROLE=launcher,
// or when OMPI_MCA_orte_default_hostfile, PRTE_MCA_prte_default_hostfile, I_MPI_HYDRA_HOST_FILE or
// HYDRA_HOST_FILE (first set, in that order) names a file `readable` says is there. Slots of a line
// without them: OMPI_MCA_orte_set_default_slots, else I_MPI_PERHOST, else 1. A slot variable that is
// not a positive number throws InputError naming it.
std::optional<MpiJobContract> mpijob_contract(const Environment& env,
                                              const std::function<bool(const std::string&)>& readable);

// The hostfile's hosts: `host slots=N` (Open MPI) or `host:N` (MPICH, Intel MPI) per line, `host`
// alone taking the contract's default slots; '#' comments. Source mpijob, slots explicit. A bad
// line throws InputError naming the file, the line and the fix.
Allocation parse_mpijob_hostfile(std::string_view text, const MpiJobContract& contract);

// "MPIJob hostfile /etc/mpi/hostfile (K_MPI_JOB_ROLE=launcher): 3 hosts x 2 slots" (a range,
// "2-4 slots", where hosts differ), for --dry-run, --verbose and doctor.
std::string describe_mpijob(const MpiJobContract& contract, const Allocation& hostfile);

// The per-pod contract (torchrun's variables, as Trainer v2's torch runtime sets them).
struct PodContract {
  int nnodes = 1;                       // PET_NNODES: pods in the job
  int node_rank = 0;                    // PET_NODE_RANK, else JOB_COMPLETION_INDEX
  std::optional<int> nproc_per_node;    // PET_NPROC_PER_NODE; nullopt for "auto" (or unset)
  std::string master_addr;              // PET_MASTER_ADDR: pod 0, which holds the store
  int master_port = 0;                  // PET_MASTER_PORT
};

// nullopt unless PET_NNODES is set. Throws InputError naming the variable for a value that is not
// a number in range, a node rank without PET_NODE_RANK or JOB_COMPLETION_INDEX, a missing
// PET_MASTER_ADDR or PET_MASTER_PORT, or PET_NNODES given as a range (elastic torchrun's "1:4").
std::optional<PodContract> pod_contract(const Environment& env);

// The job's hosts for a per-pod job of `nproc_per_node` ranks per pod: pod `node_rank` is `self`,
// the others "pod-K" (a pod knows only its own name; its ranks need only their own host's).
Allocation pod_allocation(const PodContract& contract, int nproc_per_node, const std::string& self);

}  // namespace ringrun
