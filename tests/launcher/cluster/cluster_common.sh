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
