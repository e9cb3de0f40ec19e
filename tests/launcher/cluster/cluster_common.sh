# Sourced by the cluster tests (cluster_launcher_test.sh, cluster_elastic_test.sh): skip without
# what a real Slurm in namespaces needs, bring up a cluster of the case's own (namespace prefix
# PREFIX, directory) and take it down on exit, and the job helpers. Set before sourcing: ROOT,
# BUILD, CASE, PREFIX.
CLUSTER=$ROOT/scripts/test-cluster
RINGRUN=$BUILD/bin/ringrun

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root for network namespaces"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is unavailable"
for tool in slurmctld slurmd munged srun sbatch nsenter unshare; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[[ -x $RINGRUN ]] || { echo "FAIL: $RINGRUN is not built" >&2; exit 1; }

RINGRUN_CLUSTER_DIR=$(mktemp -d /tmp/ringrun-cluster-$CASE.XXXXXX)
export RINGRUN_CLUSTER_DIR RINGRUN_CLUSTER_PREFIX=$PREFIX
# Job files (scripts, outputs, checkpoints) on the shared filesystem: the same path on every node.
OUT=$(mktemp -d /tmp/ringrun-cluster-out-$CASE.XXXXXX)
chmod 0755 "$OUT"
cleanup() {
  "$CLUSTER" down >/dev/null || echo "cleanup: test-cluster down failed" >&2
  # ringrun's per-cluster srun facts (facts/srun.hpp) name this cluster's slurm.conf.
  grep -lsF "conf $RINGRUN_CLUSTER_DIR/" /tmp/ringrun-"$(id -u)"/srun-mpi-list-* \
    /tmp/ringrun-"$(id -u)"/slurm-task-plugin-* </dev/null | xargs -r rm -f || true
  rm -rf "$RINGRUN_CLUSTER_DIR" "$OUT"
}
trap cleanup EXIT

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
run() { "$CLUSTER" run -- "$@"; }

# submit OPTIONS... SCRIPT: the job id. Output (stdout and stderr) in $OUT/job-ID.out.
submit() { (cd "$OUT" && run sbatch --parsable --chdir="$OUT" --output="$OUT/job-%j.out" "$@"); }

# Polls squeue (sbatch --wait backs off to 32 s) until the job has left it; then its state and
# exit code as "STATE RC:SIG" from scontrol (MinJobAge keeps finished jobs there).
wait_done() {
  local job=$1 limit=${2:-60} deadline
  deadline=$((SECONDS + limit))
  while [[ -n $(run squeue -h -j "$job" -o %T 2>/dev/null) ]]; do
    if ((SECONDS >= deadline)); then
      fail "job $job still in squeue after $limit s"
      run scancel "$job" || true
      break
    fi
    sleep 0.1
  done
  run scontrol show job -o "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\).*/\1 \2/p'
}

wait_running() {
  local job=$1 deadline=$((SECONDS + 30))
  until [[ $(run squeue -h -j "$job" -o %T) == RUNNING ]]; do
    ((SECONDS < deadline)) || { fail "job $job not RUNNING after 30 s"; return 1; }
    sleep 0.1
  done
}

# Ctrl-C as a terminal sends it (each of ringrun's srun steps is in a process group of its own):
# SIGINT to ringrun alone, the oldest process whose command line starts with LAUNCHER (its guard,
# supervisor/rank_spawn.hpp, is a clone with the same command line). Every process naming PROGRAM
# (ranks, srun, ringrun) must be gone within 2 s, not after --grace-period; then job JOB ends as
# ringrun's 128+SIGINT with the summary line for RANKS ranks, and no step or process is left.
interrupt_ringrun() {
  local job=$1 launcher_args=$2 program=$3 ranks=$4 out=$OUT/job-$1.out launcher start elapsed state
  launcher=$(pgrep -o -f "^$RINGRUN $launcher_args") || { fail "interrupt: no ringrun process"; return; }
  start=$(date +%s%N)
  kill -INT "$launcher"
  while pgrep -f "$program" >/dev/null && (($(date +%s%N) - start < 30000000000)); do sleep 0.02; done
  elapsed=$((($(date +%s%N) - start) / 1000000))
  echo "interrupt: the ranks, srun and ringrun were gone $elapsed ms after the SIGINT"
  ((elapsed <= 2000)) || fail "interrupt: the ranks took $elapsed ms to stop, want at most 2000"
  state=$(wait_done "$job" 30)
  [[ $state == "FAILED 130:0" ]] || fail "interrupt: job $job ended '$state', want 'FAILED 130:0' (128+SIGINT)"
  [[ $(grep -c "^ringrun: received SIGINT; stopped $ranks ranks\$" "$out") -eq 1 ]] ||
    fail "interrupt: no summary line 'ringrun: received SIGINT; stopped $ranks ranks'"
  [[ -z $(run squeue -h -s -j "$job" 2>/dev/null) ]] || fail "interrupt: steps of job $job are left"
  if pgrep -fa "$OUT/" >&2; then fail "interrupt: processes left (above)"; fi
}

job_script() { # NAME LINES...: an executable batch script in $OUT
  local f=$OUT/$1
  shift
  { echo '#!/bin/bash'; printf '%s\n' "$@"; } >"$f"
  chmod +x "$f"
  echo "$f"
}

# Brings the cluster up, runs case_$CASE, reports; on failure shows the jobs' outputs.
run_case() {
  local name=$1 start
  "$CLUSTER" up >/dev/null
  start=$SECONDS
  "case_$CASE"
  echo "$name $CASE: $((SECONDS - start)) s of jobs"
  if ((failures > 0)); then
    local f
    for f in "$OUT"/job-*.out; do
      [[ -e $f ]] || continue
      echo "--- $f ---" >&2
      head -60 "$f" >&2
    done
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "$name $CASE: all checks passed"
}
