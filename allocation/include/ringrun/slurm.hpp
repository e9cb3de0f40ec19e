// SLURM: hostlists, per-node counts, the allocation of a job (from its environment or from
// slurmctld), `srun --mpi=list` and the sbatch templates. Everything here is pure except
// allocation_from_job(), which asks slurmctld through libslurm.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ringrun/allocation.hpp"
#include "ringrun/environment_variables.hpp"

namespace ringrun {

// RINGRUN_MAX_HOSTLIST's default, for the expansions that take no environment.
inline constexpr std::size_t kDefaultMaxHostlist =
    static_cast<std::size_t>(variables::default_number(variables::kMaxHostlist));

// Expands a Slurm hostlist exactly as `scontrol show hostnames` does: entries split on ',', ' ',
// '\t', '\n' outside brackets; zero padding by the low bound's width; several bracket groups (the
// last group varies fastest, then the prefix groups, the one nearest the end outermost); order and
// duplicates kept; a suffix after ']' (Slurm >= 23.11). Invalid forms throw InputError, e.g.
// "SLURM_JOB_NODELIST='n[3-1]' : invalid range at column 3" (columns are 1-based; `what` names the
// input). The number of names is computed before any is built, and more than `limit` is refused.
// (`limit`'s default: RINGRUN_MAX_HOSTLIST's.)
std::vector<std::string> expand_hostlist(std::string_view list, std::size_t limit = kDefaultMaxHostlist,
                                         std::string_view what = "hostlist");

// Expands a Slurm per-node count list: "2(x3),1" -> {2,2,2,1}. Malformed input throws
// InputError, e.g. "SLURM_TASKS_PER_NODE='2(x3' : missing ')' at column 4". More than `limit`
// entries are refused before allocating.
std::vector<int> expand_task_counts(std::string_view counts, std::string_view what,
                                    std::size_t limit = kDefaultMaxHostlist);

// The most names a SLURM hostlist may expand to: RINGRUN_MAX_HOSTLIST from `env`, else 1,000,000.
// A value that is not a positive number throws InputError.
std::size_t max_hostlist_names(const Environment& env);

// The allocation of the job this process runs in, from SLURM_* variables; nullopt outside a job
// (neither SLURM_JOB_ID nor SLURM_JOBID set). Inside a step (SLURM_STEP_ID) the step's nodes and
// tasks; otherwise the job's. GPU ids of the node this process runs on come from, first found:
// SLURM_STEP_GPUS, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE (a count: 0..n-1).
// Other nodes get the same ids when SLURM_GPUS_PER_NODE (or _PER_TASK) gives the same count.
std::optional<Allocation> allocation_from_slurm_env(const Environment& env);

// The allocation of a running job, asked from slurmctld through libslurm (for `--jobid N` on a
// login node). Throws InputError when the job is unknown or not running, or when ringrun was built
// without libslurm.
Allocation allocation_from_job(const std::string& job_id);

// The number of ranks to start when -np is not given: the allocation's tasks (SLURM_NTASKS), else
// its GPUs, else its nodes.
int default_num_ranks(const Allocation& allocation);

// The MPI plugin names from the output of `srun --mpi=list`, in order, without duplicates
// (22.05: "MPI plugin types are...\n\tnone\n\tpmi2\n..."; 23.x: "MPI plugin types are...\n
// none\npmi2\n...specific pmix plugin versions available: pmix_v4").
std::vector<std::string> parse_srun_mpi_list(std::string_view srun_mpi_list_output);

// Values for the @PLACEHOLDERS@ of an sbatch template.
struct TemplateParams {
  std::optional<int> nodes;  // unset: the template's own (1 for single-node, 2 otherwise)
  int gpus_per_node = 4;
  std::string time = "01:00:00";
  std::vector<std::string> program = {"python", "train.py"};  // shell-quoted when rendered
};

// The names render_template() knows, in a stable order.
std::vector<std::string> template_names();

// The text of sbatch template `name` with its placeholders filled in. Unknown name or invalid
// parameters throw InputError (the message lists the known names).
std::string render_template(std::string_view name, const TemplateParams& params);

}  // namespace ringrun
