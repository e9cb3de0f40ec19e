#!/bin/bash
# slurm_cluster: bring up the real test cluster (scripts/test-cluster), check what srun gives
# each task on 4 nodes (ranks, local ids, hostnames, GPUs, PMIx, exit status), check the slurm/
# library against it (allocation from the env of a task and, through libslurm, of a running job),
# and take it down, checking that nothing is left. Exit 77 (ctest SKIP) without root or netns.
#   cluster_test.sh PATH_TO_slurm_probe
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=$ROOT/scripts/test-cluster
PROBE=${1:?usage: cluster_test.sh PATH_TO_slurm_probe}

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root for network namespaces"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is unavailable"
for tool in slurmctld slurmd munged srun nsenter unshare; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done

# A cluster of its own (directory and namespace names), so a developer's cluster is left alone.
RINGRUN_CLUSTER_DIR=$(mktemp -d /tmp/ringrun-cluster-test.XXXXXX)
# rrs: this test's own namespace prefix; the two-host runtime test, which may run beside it, makes rrt-*.
export RINGRUN_CLUSTER_DIR RINGRUN_CLUSTER_PREFIX=rrs
OUT=$(mktemp -d /tmp/ringrun-cluster-out.XXXXXX)
cleanup() {
  "$CLUSTER" down || echo "cleanup: down failed" >&2
  rm -rf "$RINGRUN_CLUSTER_DIR" "$OUT"
}
trap cleanup EXIT

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
run() { "$CLUSTER" run -- "$@"; }

start=$SECONDS
"$CLUSTER" up
took=$((SECONDS - start))
((took <= 10)) || fail "up took ${took} s (limit 10)"
"$CLUSTER" up >/dev/null || fail "a second up (idempotent) failed"
"$CLUSTER" status >/dev/null || fail "status says not up"

# 1. srun -N4 -n8, 2 tasks per node, 4 GPUs per node: every task's environment.
run srun -N4 -n8 --ntasks-per-node=2 --gpus-per-node=4 -l sh -c 'env; echo HOST=$(hostname); echo CWD=$(pwd)' \
  >"$OUT/env.txt"
for rank in 0 1 2 3 4 5 6 7; do
  get() { sed -n "s/^ *$rank: $1=//p" "$OUT/env.txt"; }
  node=n$((rank / 2 + 1))
  [[ $(get SLURM_PROCID) == "$rank" ]] || fail "task $rank: SLURM_PROCID='$(get SLURM_PROCID)'"
  [[ $(get SLURM_LOCALID) == $((rank % 2)) ]] || fail "task $rank: SLURM_LOCALID='$(get SLURM_LOCALID)', want $((rank % 2))"
  [[ $(get SLURMD_NODENAME) == "$node" ]] || fail "task $rank: SLURMD_NODENAME='$(get SLURMD_NODENAME)', want $node"
  [[ $(get HOST) == "$node" ]] || fail "task $rank: hostname '$(get HOST)', want $node (own UTS namespace)"
  [[ $(get CUDA_VISIBLE_DEVICES) == 0,1,2,3 ]] || fail "task $rank: CUDA_VISIBLE_DEVICES='$(get CUDA_VISIBLE_DEVICES)'"
  [[ $(get SLURM_STEP_GPUS) == 0,1,2,3 ]] || fail "task $rank: SLURM_STEP_GPUS='$(get SLURM_STEP_GPUS)'"
  [[ $(get CWD) == "$PWD" ]] || fail "task $rank: cwd '$(get CWD)', want $PWD"
done

# 2. One GPU per task: CUDA_VISIBLE_DEVICES = local id.
run srun -N4 -n8 --ntasks-per-node=2 --gpus-per-node=2 --gpu-bind=single:1 -l printenv CUDA_VISIBLE_DEVICES \
  >"$OUT/cvd.txt"
for rank in 0 1 2 3 4 5 6 7; do
  got=$(sed -n "s/^ *$rank: //p" "$OUT/cvd.txt")
  [[ $got == $((rank % 2)) ]] || fail "--gpu-bind=single:1 task $rank: CUDA_VISIBLE_DEVICES='$got', want $((rank % 2))"
done

# 3. PMIx and the exit status.
ranks=$(run srun --mpi=pmix -N2 -n4 printenv PMIX_RANK | sort | tr '\n' ' ')
[[ $ranks == "0 1 2 3 " ]] || fail "srun --mpi=pmix: PMIX_RANK '$ranks'"
rc=0
run srun -N1 -n1 sh -c 'exit 3' || rc=$?
((rc == 3)) || fail "run did not return the command's exit status: $rc, want 3"

# 4. The library on the real environment of a task (allocation_from_slurm_env).
got=$(run srun -N4 -n8 --ntasks-per-node=2 --gpus-per-node=4 -l "$PROBE" env | sort -n | sed -n 's/^ *3: //p')
want_re='^job=[0-9]+ step=1 ntasks=8 default=8 hosts=n1:2: n2:2:0,1,2,3 n3:2: n4:2:$'
[[ $got =~ $want_re ]] || fail "allocation_from_slurm_env in task 3: '$got'"

# 5. The library on a running job through libslurm (allocation_from_job), as from a login node.
job=$(run sbatch --parsable -N2 --ntasks-per-node=3 --gpus-per-node=2 -o /dev/null --wrap 'sleep 120')
deadline=$((SECONDS + 30))
until [[ $(run squeue -h -j "$job" -o %T) == RUNNING ]]; do
  ((SECONDS < deadline)) || { fail "job $job not running after 30 s"; break; }
  sleep 0.1
done
got=$(run "$PROBE" job "$job" || true)
[[ $got == "job=$job step=0 ntasks=6 default=6 hosts=n1:3:0,1 n2:3:0,1" ]] || fail "allocation_from_job($job): '$got'"

# 6. down with the job still running: nothing may be left.
"$CLUSTER" down
trap 'rm -rf "$OUT"' EXIT
[[ ! -e $RINGRUN_CLUSTER_DIR ]] || fail "down left $RINGRUN_CLUSTER_DIR"
if ip netns list | grep -q '^rrs-'; then fail "down left namespaces: $(ip netns list | grep '^rrs-' | tr '\n' ' ')"; fi
for cmdline in /proc/[0-9]*/cmdline; do
  if tr '\0' ' ' <"$cmdline" 2>/dev/null | grep -qF "$RINGRUN_CLUSTER_DIR"; then
    fail "down left process ${cmdline//[^0-9]/}: $(tr '\0' ' ' <"$cmdline")"
  fi
done
"$CLUSTER" status >/dev/null && fail "status says up after down"

if ((failures > 0)); then
  echo "--- srun output ---" >&2
  head -50 "$OUT/env.txt" >&2 || true
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "slurm_cluster: all checks passed"
