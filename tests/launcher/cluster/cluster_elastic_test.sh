#!/bin/bash
# Elastic mode inside a SLURM allocation on the real test cluster (README, Elastic training): jobs
# of 4 nodes x 2 ranks of the runtime's elastic test rank (tests/runtime/elastic_rank.cpp), each
# started by ringrun as its own one-task srun step, lose or give back node n4. Each case brings up a
# cluster of its own and takes it down; exit 77 (ctest SKIP) without root, namespaces or Slurm.
#   cluster_elastic_test.sh BUILD_DIR CASE
#   CASE: node_lost (n4's ranks SIGKILL themselves) | node_down (scontrol sets n4 DOWN) |
#         drain (n4 drained: its ranks leave; resumed: new ranks fill its slots) |
#         hosts (-H hosts: an mpirun per process; n4's ranks SIGKILL themselves) |
#         grow (a 3-node job is handed n4 by Slurm's job expansion; new ranks fill it) |
#         interrupt (SIGINT to ringrun: every member stops within 2 s, no step is left) |
#         discovery (--host-discovery-script names n1-n3, then drops n2 and adds n4: an mpirun
#         per process, n2's ranks retired, n4's started)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=$(cd "${1:?usage: cluster_elastic_test.sh BUILD_DIR CASE}" && pwd)
CASE=${2:?usage: cluster_elastic_test.sh BUILD_DIR CASE}
declare -A prefixes=([node_lost]=rre1 [node_down]=rre2 [drain]=rre3 [hosts]=rre4 [grow]=rre5 [interrupt]=rre6 [discovery]=rre7)
[[ -n ${prefixes[$CASE]:-} ]] || { echo "unknown case '$CASE'; one of: ${!prefixes[*]}" >&2; exit 2; }
PREFIX=${prefixes[$CASE]}
source "$HERE/cluster_common.sh"
[[ -x $BUILD/tests/runtime_elastic_rank ]] || skip "$BUILD/tests/runtime_elastic_rank is not built"
# A copy under $OUT, so that its command lines (and srun's, and ringrun's) name this case only.
RANK=$OUT/elastic_rank
cp "$BUILD/tests/runtime_elastic_rank" "$RANK"

# Waits (up to LIMIT s) until COUNT lines of OUTPUT match the extended regex.
wait_lines() {
  local output=$1 pattern=$2 count=$3 limit=${4:-60} deadline
  deadline=$((SECONDS + limit))
  local n
  until n=$(grep -cE "$pattern" "$output" 2>/dev/null) || true; ((${n:-0} >= count)); do
    ((SECONDS < deadline)) || { fail "no $count lines matching '$pattern' in $limit s"; return 1; }
    sleep 0.1
  done
}

# STATE of the job, the DONE lines (COUNT of them, in a world of SIZE), and nothing left running.
check_end() {
  local job=$1 state=$2 count=$3 size=$4 out=$OUT/job-$1.out
  [[ $state == "COMPLETED 0:0" ]] || fail "job $job: '$state', want 'COMPLETED 0:0'"
  local done_lines
  done_lines=$(grep -cE "^\[[0-9]+\]<stdout>:DONE id=[0-9]+ epoch=[0-9]+ rank=[0-9]+ size=$size " "$out" || true)
  ((done_lines == count)) || fail "job $job: $done_lines DONE lines in a world of $size, want $count"
  if pgrep -fa "$OUT/" >&2; then fail "job $job: processes left (above)"; fi
}

# The elastic lines of OUTPUT for ids 6 and 7 (n4's ranks) ending as WHAT (an extended regex).
check_n4_lost() {
  local output=$1 what=$2 name=$3 id
  for id in 6 7; do
    grep -qE "^ringrun: elastic: rank [67] \(id $id, host n4\) $what; world [0-9]+ has [67] ranks$" "$output" ||
      fail "$name: no elastic line for id $id of n4"
  done
}

# Started by `ringrun template elastic` (--no-kill, --no-requeue, --min-np 4): ids 6 and 7, the
# ranks on n4, SIGKILL themselves at step 20; the six others finish in the new world.
case_node_lost() {
  local script=$OUT/elastic.sbatch job state out
  PATH=$BUILD/bin:$PATH "$RINGRUN" template elastic --nodes 4 --gpus-per-node 2 -- "$RANK" 6,7 20,20 60 >"$script"
  job=$(PATH=$BUILD/bin:$PATH submit "$script")
  state=$(wait_done "$job" 120)
  out=$OUT/job-$job.out
  check_end "$job" "$state" 6 6
  check_n4_lost "$out" "exited with code 137" node_lost
  ! grep -qE "^\[[67]\]<stdout>:DONE" "$out" || fail "node_lost: a rank of n4 finished"
}

# n4 set DOWN while the job runs: its steps end ('srun: error: Node failure on n4', srun exits 0),
# which is a failure of their slots, not the job's end; the six others finish.
case_node_down() {
  local script job state out
  script=$(job_script down.sh "exec '$RINGRUN' --min-np 4 -- '$RANK' 99 0 10000")
  job=$(submit --no-kill --no-requeue -N4 --ntasks-per-node=2 "$script")
  out=$OUT/job-$job.out
  wait_lines "$out" '<stdout>:EPOCH id=[0-9] epoch=0 ' 8 && run scontrol update nodename=n4 state=down reason=ringrun-test
  state=$(wait_done "$job" 120)
  check_end "$job" "$state" 6 6
  check_n4_lost "$out" "lost its node \(srun: Node failure on n4\)" node_down
}

# n4 drained: ids 6 and 7 are removed at their next commit and exit 0; resumed: ids 8 and 9 start
# in its slots and the eight finish in world 2 (the rank's FINAL_EPOCH).
case_drain() {
  local script job state out
  script=$(job_script drain.sh "exec '$RINGRUN' --min-np 4 -- '$RANK' 99 0 2000 2")
  job=$(submit --no-kill --no-requeue -N4 --ntasks-per-node=2 "$script")
  out=$OUT/job-$job.out
  wait_lines "$out" '<stdout>:EPOCH id=[0-9] epoch=0 ' 8 && run scontrol update nodename=n4 state=drain reason=ringrun-test
  wait_lines "$out" '^ringrun: elastic: host n4 offers 0 slots instead of 2; world 1 has 6 ranks; ids 6, 7 are removed \(exiting at their next commit\)$' 1 &&
    run scontrol update nodename=n4 state=resume
  state=$(wait_done "$job" 120)
  check_end "$job" "$state" 8 8
  # n4 returns while ids 6 and 7 may still be exiting there (under load): then one slot starts on
  # the return and the other once its process is gone.
  grep -qE '^ringrun: elastic: host n4 offers 2 slots instead of 0; world 2 has (8 ranks; ids 8, 9 start as ranks 6, 7|7 ranks; id 8 starts as rank 6)$' "$out" ||
    fail "drain: no line for n4's return"
  [[ $(grep -cE '^\[[67]\]<stdout>:REMOVED id=[67] ' "$out") -eq 2 ]] || fail "drain: ids 6 and 7 were not both removed"
}

# -H hosts: each process is an mpirun of one (its orted started by srun here, by ssh elsewhere);
# ids 6 and 7 on n4 SIGKILL themselves, mpirun reports it, the six others finish. The first death
# blacklists n4 (Horovod's rule for named hosts): one world without both, one reset in all.
case_hosts() {
  local script job state out
  script=$(job_script hosts.sh "exec '$RINGRUN' -H n1:2,n2:2,n3:2,n4:2 --min-np 4 -- '$RANK' 6,7 20,20 60")
  job=$(submit --no-kill --no-requeue -N4 --ntasks-per-node=2 "$script")
  state=$(wait_done "$job" 120)
  out=$OUT/job-$job.out
  check_end "$job" "$state" 6 6
  grep -qE '^ringrun: elastic: rank [67] \(id [67], host n4\) exited with code 137 \(host n4 is blacklisted\); world 1 has 6 ranks(; id [67] is removed \(exiting at its next commit\))?$' "$out" ||
    fail "hosts: no line for n4's loss in world 1"
  [[ $(grep -c '^ringrun: elastic:' "$out") -eq 1 ]] || fail "hosts: more than one elastic line (one reset per failure)"
}

# A job on n1-n3 gains n4 (another allocation with --dependency=expand hands it over: the test
# cluster has permit_job_expansion): ringrun sees it in the job's node list, starts ids 6 and 7
# there, and the eight finish in world 1 (the rank's FINAL_EPOCH).
case_grow() {
  local script job state out helper
  script=$(job_script grow.sh "exec '$RINGRUN' --min-np 4 -- '$RANK' 99 0 2000 1")
  job=$(submit --no-kill --no-requeue -N3 -w n1,n2,n3 --ntasks-per-node=2 "$script")
  out=$OUT/job-$job.out
  wait_lines "$out" '<stdout>:EPOCH id=[0-9] epoch=0 ' 6 || return
  run salloc --no-shell -N1 -w n4 --dependency="expand:$job" 2>/dev/null
  helper=$(run squeue -h -o '%i %N' | awk '$2 == "n4" {print $1}')
  [[ -n $helper ]] || { fail "grow: no allocation of n4 to hand over"; return; }
  run scontrol update jobid="$helper" NumNodes=0 || fail "grow: job $helper did not give up n4"
  run scontrol update jobid="$job" NumNodes=ALL 2>/dev/null || true  # 22.05 may refuse; n4 moves all the same
  state=$(wait_done "$job" 120)
  check_end "$job" "$state" 8 8
  grep -qE '^ringrun: elastic: host n4 offers 2 slots instead of 0; world 1 has 8 ranks; ids 6, 7 start as ranks 6, 7$' "$out" ||
    fail "grow: no line for n4 joining"
}

# Ctrl-C to ringrun: every member stops within 2 s, as in the other modes (srun passes one SIGINT
# on to its task only with --disable-status), with the other modes' summary; nothing is left.
case_interrupt() {
  local script job
  script=$(job_script interrupt.sh "exec '$RINGRUN' --min-np 4 -- '$RANK' 99 0 1000000")
  job=$(submit --no-kill --no-requeue -N4 --ntasks-per-node=2 "$script")
  wait_lines "$OUT/job-$job.out" '<stdout>:EPOCH id=[0-9] epoch=0 ' 8 || return
  interrupt_ringrun "$job" "--min-np 4 -- $RANK " "$RANK" 8
}

# Horovod's elastic setup off Slurm's own elastic path: the hosts come from the user's script
# (here, what a file holds), each process is an mpirun of one (its orted started by srun here,
# by ssh elsewhere). The script drops n2 and adds n4: ids 2 and 3 leave at their next commit,
# ids 6 and 7 start on n4, and the six finish in world 1 (the rank's FINAL_EPOCH).
case_discovery() {
  local script job state out
  printf 'n1:2\nn2:2\nn3:2\n' >"$OUT/hosts"
  script=$(job_script discovery.sh \
    "exec '$RINGRUN' --min-np 4 --host-discovery-script 'cat $OUT/hosts' -- '$RANK' 99 0 2000 1")
  job=$(submit --no-kill --no-requeue -N4 --ntasks-per-node=2 "$script")
  out=$OUT/job-$job.out
  wait_lines "$out" '<stdout>:EPOCH id=[0-9] epoch=0 ' 6 || return
  printf 'n1:2\nn3:2\nn4:2\n' >"$OUT/hosts"
  state=$(wait_done "$job" 120)
  check_end "$job" "$state" 6 6
  grep -qE '^ringrun: elastic: host n2 offers 0 slots instead of 2, host n4 offers 2 slots instead of 0; world 1 has 6 ranks; ids 6, 7 start as ranks 4, 5; ids 2, 3 are removed \(exiting at their next commit\)$' "$out" ||
    fail "discovery: no line for n2 leaving and n4 joining"
  grep -qE '^\[[23]\]<stdout>:REMOVED id=[23] ' "$out" || fail "discovery: n2's ranks were not removed"
}

run_case cluster_elastic
