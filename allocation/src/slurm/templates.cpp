// sbatch templates (`ringrun template NAME`). The canonical texts live here; templates/*.sbatch
// are these rendered with the default parameters, and a unit test keeps the two equal.
#include <fmt/format.h>

#include <array>

#include <fmt/ranges.h>

#include "ringrun/slurm.hpp"

namespace ringrun {
namespace {

struct TemplateText {
  std::string_view name;
  int default_nodes;
  bool fixed_nodes;  // the template is for exactly default_nodes nodes
  std::string_view text;
};

// Placeholders: @NODES@ @TASKS_PER_NODE@ (one rank per GPU, or 1 without GPUs) @GPUS_PER_NODE@
// @GPU_REQUEST@ (the --gpus-per-node line, or a comment without GPUs) @TIME@ @PROGRAM@ @MIN_NP@
// (the ranks of half the nodes, rounded up: elastic's --min-np).
constexpr std::array templates{
    TemplateText{"single-node", 1, true, R"(#!/bin/bash
# ringrun sbatch template "single-node": one node, @GPUS_PER_NODE@ GPU(s), one rank per GPU.
# Submit: sbatch single-node.sbatch    (command-line options override the #SBATCH lines)
#SBATCH --job-name=ringrun-single-node
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=@TASKS_PER_NODE@
@GPU_REQUEST@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
set -euo pipefail

# ringrun reads the allocation from the SLURM_* variables: as many ranks as tasks, in one srun
# step, each rank pinned to its own GPU and to the cores near it. Every rank gets RINGRUN_RANK,
# RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, so torch.distributed's env://
# works unchanged.
exec ringrun -- @PROGRAM@
)"},
    TemplateText{"multi-node-srun", 2, false, R"(#!/bin/bash
# ringrun sbatch template "multi-node-srun": @NODES@ nodes x @GPUS_PER_NODE@ GPU(s), one rank per
# GPU, started by srun.
# Submit: sbatch multi-node-srun.sbatch    (command-line options override the #SBATCH lines)
#SBATCH --job-name=ringrun-multi-node-srun
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=@TASKS_PER_NODE@
@GPU_REQUEST@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
set -euo pipefail

# This script runs on the first node. ringrun starts one srun step over the whole allocation
# (block order: ranks 0..@TASKS_PER_NODE@-1 on the first node, and so on); its tasks are
# ringrun's task shim, which pins each rank to its GPU and cores and then execs the program.
# A failing rank stops the others and ringrun exits with its code. --dry-run prints the plan.
exec ringrun --launcher srun -- @PROGRAM@
)"},
    TemplateText{"multi-node-mpirun", 2, false, R"(#!/bin/bash
# ringrun sbatch template "multi-node-mpirun": @NODES@ nodes x @GPUS_PER_NODE@ GPU(s), one rank
# per GPU, started by Open MPI's mpirun (for programs that also use MPI).
# Submit: sbatch multi-node-mpirun.sbatch    (command-line options override the #SBATCH lines)
#SBATCH --job-name=ringrun-multi-node-mpirun
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=@TASKS_PER_NODE@
@GPU_REQUEST@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
set -euo pipefail

# mpirun reads the slots from SLURM_TASKS_PER_NODE and starts its daemons on the other nodes
# through Slurm. Under mpirun every rank sees SLURM_LOCALID=0, so ringrun's task shim takes the
# rank from OMPI_COMM_WORLD_* and picks its GPU itself.
exec ringrun --launcher mpirun -- @PROGRAM@
)"},
    TemplateText{"preemptible", 2, false, R"(#!/bin/bash
# ringrun sbatch template "preemptible": @NODES@ nodes x @GPUS_PER_NODE@ GPU(s). 90 s before the
# time limit the program checkpoints and the job requeues itself; when it runs again the program
# resumes from the checkpoint.
# Submit: sbatch preemptible.sbatch    (command-line options override the #SBATCH lines)
#SBATCH --job-name=ringrun-preemptible
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=@TASKS_PER_NODE@
@GPU_REQUEST@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
# USR1 90 s before the end. "B:" sends it to this script only (without it Slurm signals the
# steps and the trap below never runs); the script forwards it to ringrun, which forwards it
# to every rank.
#SBATCH --signal=B:USR1@90
set -uo pipefail

# The program saves its state under $CHECKPOINT_DIR when it gets SIGUSR1, and at start resumes
# from the newest checkpoint there if any. SLURM_RESTART_COUNT counts the requeues.
export CHECKPOINT_DIR="${CHECKPOINT_DIR:-$PWD/checkpoints/$SLURM_JOB_ID}"
mkdir -p "$CHECKPOINT_DIR"
echo "ringrun: job $SLURM_JOB_ID run ${SLURM_RESTART_COUNT:-0}, checkpoints in $CHECKPOINT_DIR"

checkpoint_and_requeue() {
  echo "ringrun: USR1 at $(date +%T): checkpointing, then requeueing job $SLURM_JOB_ID"
  kill -USR1 "$ringrun_pid" 2>/dev/null || true
  wait "$ringrun_pid"   # the ranks write their checkpoint and exit
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
}
trap checkpoint_and_requeue USR1

# In the background, so that bash runs the trap as soon as USR1 arrives.
ringrun -- @PROGRAM@ &
ringrun_pid=$!
wait "$ringrun_pid"
exit $?
)"},
    TemplateText{"elastic", 4, false, R"(#!/bin/bash
# ringrun sbatch template "elastic": @NODES@ nodes x @GPUS_PER_NODE@ GPU(s), one rank per GPU. A
# node that fails or is drained costs the job its ranks, not the job: the others re-form the
# ring in place and go on from their last commit (ringrun.torch.elastic, `man ringrun-torch`).
# Submit: sbatch elastic.sbatch    (command-line options override the #SBATCH lines)
#SBATCH --job-name=ringrun-elastic
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=@TASKS_PER_NODE@
@GPU_REQUEST@
#SBATCH --time=@TIME@
#SBATCH --output=%x-%j.out
# Without --no-kill Slurm ends the whole job when one of its nodes fails; with it the node is
# dropped from the job, and ringrun drops its ranks.
#SBATCH --no-kill
# A requeued job starts every rank again from its checkpoint: elastic mode keeps the survivors.
#SBATCH --no-requeue
set -uo pipefail

# This script runs on the first node, and so does ringrun: losing that node ends the job. ringrun
# starts each rank as its own one-task srun step and asks squeue and sinfo every second which
# nodes are still in the job and not drained. Below --min-np ranks it waits --elastic-timeout
# (600 s) for slots to come back (a drained node resumed), then ends with one line and exit 1.
exec ringrun --min-np @MIN_NP@ -- @PROGRAM@
)"},
};

// One word for the shell: plain when it has only safe characters, else in single quotes.
std::string shell_quote(std::string_view word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789_./:=@%+,-") == word.npos;
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (auto pos = text.find(from); pos != text.npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
}

}  // namespace

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& t : templates) names.emplace_back(t.name);
  return names;
}

std::string render_template(std::string_view name, const TemplateParams& params) {
  const TemplateText* found = nullptr;
  for (const auto& t : templates)
    if (t.name == name) found = &t;
  if (!found)
    throw InputError(fmt::format("template '{}' : unknown; known templates: {}", name,
                                 fmt::join(template_names(), ", ")));
  const int nodes = params.nodes.value_or(found->default_nodes);
  if (found->fixed_nodes && nodes != found->default_nodes)
    throw InputError(fmt::format("template {} --nodes {} : this template is for {} node(s); use "
                                 "multi-node-srun for more",
                                 name, nodes, found->default_nodes));
  if (nodes < 1) throw InputError(fmt::format("template {} --nodes {} : needs at least 1", name, nodes));
  if (params.gpus_per_node < 0)
    throw InputError(fmt::format("template {} --gpus-per-node {} : must be 0 or more", name, params.gpus_per_node));
  // Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
  if (params.time.empty() || params.time.find_first_not_of("0123456789:-") != std::string::npos)
    throw InputError(fmt::format("template {} --time '{}' : expected a Slurm time like 01:00:00 or 2-00:00:00",
                                 name, params.time));
  if (params.program.empty() || params.program.front().empty())
    throw InputError(fmt::format("template {} : no program; give one after --, e.g. -- python train.py", name));

  std::string program;
  for (const auto& word : params.program) {
    if (!program.empty()) program += ' ';
    program += shell_quote(word);
  }
  const int tasks_per_node = params.gpus_per_node > 0 ? params.gpus_per_node : 1;
  const std::string gpu_request = params.gpus_per_node > 0
                                      ? fmt::format("#SBATCH --gpus-per-node={}", params.gpus_per_node)
                                      : std::string("# (no GPUs requested: --gpus-per-node 0)");

  std::string text(found->text);
  replace_all(text, "@NODES@", std::to_string(nodes));
  replace_all(text, "@TASKS_PER_NODE@", std::to_string(tasks_per_node));
  replace_all(text, "@GPUS_PER_NODE@", std::to_string(params.gpus_per_node));
  replace_all(text, "@GPU_REQUEST@", gpu_request);
  replace_all(text, "@TIME@", params.time);
  replace_all(text, "@PROGRAM@", program);
  replace_all(text, "@MIN_NP@", std::to_string((nodes + 1) / 2 * tasks_per_node));
  return text;
}

}  // namespace ringrun
