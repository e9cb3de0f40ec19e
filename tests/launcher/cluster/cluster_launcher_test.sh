#!/bin/bash
# ringrun on the real test cluster (scripts/test-cluster): sbatch jobs whose batch script runs
# ringrun, checked from the job's output and Slurm's record of it. Each case brings up a cluster
# of its own (namespace prefix and directory) and takes it down on exit. Exit 77 (ctest SKIP)
# without root, network namespaces or Slurm.
#   cluster_launcher_test.sh BUILD_DIR CASE
#   CASE: srun_env | mpirun_env | failure_scancel | allreduce | templates | argv | doctor | output_stress | torch
#         | launcher_noise | interrupt
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BUILD=$(cd "${1:?usage: cluster_launcher_test.sh BUILD_DIR CASE}" && pwd)
CASE=${2:?usage: cluster_launcher_test.sh BUILD_DIR CASE}
TRAIN=$BUILD/bin/ringrun-example-train

declare -A prefixes=([srun_env]=rrl1 [mpirun_env]=rrl2 [failure_scancel]=rrl3 [allreduce]=rrl4 [templates]=rrl5
  [argv]=rrl6 [doctor]=rrl7 [output_stress]=rrl8 [torch]=rrl9 [launcher_noise]=rrl10
  [mem_bind]=rrl11 [interrupt]=rrl12)
[[ -n ${prefixes[$CASE]:-} ]] || { echo "unknown case '$CASE'; one of: ${!prefixes[*]}" >&2; exit 2; }
PREFIX=${prefixes[$CASE]}
source "$HERE/cluster_common.sh"

# The ENV line of rank R from a job output: "field=value ..." (see print_env.sh).
env_line() { sed -n "s/^\[$2\]<stdout>:ENV //p" "$1"; }
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# Checks every rank's variables in OUTPUT (N nodes x PER ranks); GPUs: the rank's entry of LIST
# (the GPUs the job was given on each node, in order), never its raw local rank.
check_ranks() {
  local output=$1 nodes=$2 per=$3 gpu_list=$4 launcher=$5
  local size=$((nodes * per)) r line gpus
  IFS=, read -r -a gpus <<<"$gpu_list"
  [[ $(grep -c '<stdout>:ENV ' "$output") -eq $size ]] ||
    fail "$launcher: $(grep -c '<stdout>:ENV ' "$output") ENV lines, want $size"
  for ((r = 0; r < size; r++)); do
    line=$(env_line "$output" "$r")
    [[ -n $line ]] || { fail "$launcher: no output from rank $r"; continue; }
    local node=n$((r / per + 1)) local_rank=$((r % per))
    local -A want=([host]=$node [hostname]=$node [rank]=$r [size]=$size [local_rank]=$local_rank
      [local_size]=$per [cross_rank]=$((r / per)) [cross_size]=$nodes [RANK]=$r [WORLD_SIZE]=$size
      [LOCAL_RANK]=$local_rank [LOCAL_WORLD_SIZE]=$per [GROUP_RANK]=$((r / per)) [MASTER_ADDR]=n1
      [cvd]=${gpus[local_rank]} [ifname]=eth0 [nccl_ifname]==eth0)
    local k
    for k in "${!want[@]}"; do
      [[ $(field "$line" "$k") == "${want[$k]}" ]] || fail "$launcher rank $r: $k='$(field "$line" "$k")', want '${want[$k]}'"
    done
    [[ $(field "$line" MASTER_PORT) =~ ^[0-9]+$ ]] || fail "$launcher rank $r: MASTER_PORT='$(field "$line" MASTER_PORT)'"
    # The store at n1's address on the chosen interface (ringrun runs on n1, the batch host).
    [[ $(field "$line" store) =~ ^10\.77\.0\.1:[0-9]+$ ]] || fail "$launcher rank $r: store='$(field "$line" store)', want 10.77.0.1:PORT"
    if [[ $launcher == mpirun ]]; then
      [[ $(field "$line" ompi_rank) == "$r" ]] || fail "mpirun rank $r: OMPI_COMM_WORLD_RANK='$(field "$line" ompi_rank)'"
    fi
  done
}

# A job that holds GPUs 0,1 of every node, so the job under test gets 2,3: CUDA_VISIBLE_DEVICES
# must then be 2 and 3, which a raw local rank (0, 1) would not give.
hold_gpus() {
  local job
  job=$(submit -N4 --ntasks-per-node=1 --gpus-per-node=2 --job-name=holder --wrap 'sleep 600')
  wait_running "$job"
}

# Runs ringrun with LAUNCHER_ARGS under sbatch -N4 --ntasks-per-node=2 --gpus-per-node=2 and
# checks every rank, the launcher's argv in --verbose and --dry-run, and the interface choice.
env_case() {
  local launcher=$1
  shift
  hold_gpus
  local script job state out
  script=$(job_script env.sh \
    "'$RINGRUN' --dry-run $* -- '$HERE/print_env.sh' || exit 9" \
    "'$RINGRUN' --dry-run --srun-mpi none $* -- '$HERE/print_env.sh' | sed -n 's/^command: /command-none: /p'" \
    "exec '$RINGRUN' --verbose $* -- '$HERE/print_env.sh'")
  job=$(submit -N4 --ntasks-per-node=2 --gpus-per-node=2 "$script")
  state=$(wait_done "$job" 120)
  out=$OUT/job-$job.out
  [[ $state == "COMPLETED 0:0" ]] || fail "$launcher job $job: '$state', want 'COMPLETED 0:0'"
  check_ranks "$out" 4 2 2,3 "$launcher"
  grep -q "^ringrun: 8 ranks on 4 host(s) with the $launcher launcher" "$out" ||
    fail "$launcher: --verbose does not say 'with the $launcher launcher'"
  local verbose_cmd dry_cmd
  verbose_cmd=$(sed -n 's/^ringrun: command: //p' "$out")
  dry_cmd=$(sed -n 's/^command: //p' "$out")
  [[ $verbose_cmd == "$launcher "* ]] || fail "$launcher: --verbose argv '$verbose_cmd'"
  [[ $dry_cmd == "$launcher "* ]] || fail "$launcher: --dry-run argv '$dry_cmd'"
  [[ $verbose_cmd == *" $RINGRUN task -- $HERE/print_env.sh" ]] || fail "$launcher: argv does not end in the task shim: '$verbose_cmd'"
  if [[ $launcher == srun ]]; then
    local want
    for want in --ntasks=8 --nodes=4 --distribution=block --kill-on-bad-exit=1 --nodelist=n1,n2,n3,n4; do
      [[ " $verbose_cmd " == *" $want "* ]] || fail "srun argv lacks $want: '$verbose_cmd'"
    done
    # TaskPlugin=task/none: srun cannot bind, and warns about any --cpu-bind (ringrun(1),
    # DESCRIPTION).
    [[ " $verbose_cmd " != *" --cpu-bind"* ]] || fail "srun argv asks a task/none cluster for cpu binding: '$verbose_cmd'"
    if run srun --mpi=list 2>&1 | grep -qw pmix; then
      [[ " $verbose_cmd " == *" --mpi=pmix "* ]] || fail "srun offers pmix but the argv lacks --mpi=pmix: '$verbose_cmd'"
      [[ $(field "$(env_line "$out" 5)" mpi_type) == pmix ]] || fail "srun: rank 5 SLURM_MPI_TYPE is not pmix"
    fi
    # --srun-mpi none: the same step without PMIx (PMIx setup is most of a step's cost; ringrun(1),
    # --srun-mpi).
    local none_cmd
    none_cmd=$(sed -n 's/^command-none: //p' "$out")
    [[ $none_cmd == "srun "* && " $none_cmd " != *" --mpi="* ]] || fail "--srun-mpi none: srun argv '$none_cmd'"
  else
    [[ " $verbose_cmd " == *" -np 8 -H n1:2,n2:2,n3:2,n4:2 --bind-to none --map-by slot "* ]] ||
      fail "mpirun argv: '$verbose_cmd'"
    [[ " $verbose_cmd " != *"RINGRUN_JOB_SECRET="* ]] || fail "mpirun argv carries the job secret's value"
  fi
  grep -q "^ringrun: interface probe: srun .*--ntasks-per-node=1 .* task --probe-interfaces$" "$out" ||
    fail "$launcher: --verbose does not show the interface probe step"
  grep -q "^ringrun: network interface eth0: up on all 4 nodes, every node's address in one subnet 10.77.0.0/24" "$out" ||
    fail "$launcher: --verbose does not give the interface choice and its reason"
}

case_srun_env() { env_case srun; }
case_mpirun_env() { env_case mpirun --launcher mpirun; }

case_failure_scancel() {
  local script job state out
  # 1. Rank 3 exits 3: the job fails with ringrun's summary line and rank 3's status. The other
  # ranks are still running, so srun stops them (SIGTERM) and itself exits 143, the worst of its
  # tasks; ringrun returns the failing rank's 3, as the local backend does.
  script=$(job_script fail.sh "export FAIL_RANK=3 SLEEP_OTHERS=30" "exec '$RINGRUN' -- '$HERE/print_env.sh'")
  job=$(submit -N4 --ntasks-per-node=2 "$script")
  state=$(wait_done "$job" 60)
  out=$OUT/job-$job.out
  [[ $state == "FAILED 3:0" ]] || fail "failing rank: job $job '$state', want 'FAILED 3:0'"
  grep -q '^\[3\]<stdout>:rank 3 fails on purpose' "$out" || fail "failing rank: no output from rank 3"
  grep -q '^ringrun: rank 3 (host n2) exited with code 3; stopped 7 other ranks$' "$out" ||
    fail "failing rank: no ringrun summary line"
  grep -q 'task 3: Exited with exit code 3' "$out" || fail "failing rank: srun does not name task 3"

  # 2. scancel of a running job leaves no rank behind on any node.
  cp "$HERE/print_env.sh" "$OUT/sleeper.sh"
  script=$(job_script sleep.sh "export SLEEP=600" "exec '$RINGRUN' -- '$OUT/sleeper.sh'")
  job=$(submit -N4 --ntasks-per-node=2 "$script")
  wait_running "$job"
  local deadline=$((SECONDS + 30)) n=0
  count_ranks() { pgrep -f "$OUT/sleeper.sh" | wc -l; }
  # Ranks that run: their `sleep 600` started. Cancelling a rank between fork and sweep is
  # Slurm's linuxproc race (an orphan it never sees), not what this case is about.
  count_sleeping() {
    local p c=0
    for p in $(pgrep -x sleep); do
      grep -q "$OUT/sleeper.sh" "/proc/$(ps -o ppid= -p "$p" | tr -d ' ')/cmdline" 2>/dev/null && c=$((c + 1))
    done
    echo "$c"
  }
  until (($(count_sleeping) >= 8)); do
    ((SECONDS < deadline)) || { fail "scancel: only $(count_sleeping) of 8 ranks started in 30 s"; break; }
    sleep 0.1
  done
  # The ranks run in the nodes' namespaces (not on this host's network).
  local pid nets=""
  for pid in $(pgrep -f "$OUT/sleeper.sh"); do
    nets+=$(readlink "/proc/$pid/ns/net" 2>/dev/null)" "
  done
  local n1net
  n1net=$(readlink /proc/self/ns/net)
  [[ $nets != *"$n1net"* ]] || fail "scancel: a rank runs in the test's own network namespace"
  run scancel "$job"
  state=$(wait_done "$job" 60)
  [[ $state == CANCELLED* ]] || fail "scancel: job $job '$state', want CANCELLED"
  deadline=$((SECONDS + 15))
  while (($(count_ranks) > 0)); do
    if ((SECONDS >= deadline)); then
      fail "scancel: ranks left behind 15 s after the job ended:" \
        "$(ps -o pid=,ppid=,stat=,wchan:24=,args= -p "$(pgrep -d, -f "$OUT/sleeper.sh")" | tr '\n' ';')"
      break
    fi
    sleep 0.1
  done
  n=$(pgrep -f "$RINGRUN task" | xargs -r -I{} sh -c 'tr "\0" " " </proc/{}/cmdline; echo' | grep -c "$OUT" || true)
  ((n == 0)) || fail "scancel: $n task shims left behind"
}

case_allreduce() {
  [[ -x $TRAIN ]] || { fail "$TRAIN is not built"; return; }
  local local_sum cluster_sum script job state out
  local_sum=$("$RINGRUN" -np 1 -- "$TRAIN" | sed -n 's/.*final ranks 1 weights checksum //p')
  [[ -n $local_sum ]] || { fail "ringrun -np 1 $TRAIN printed no checksum"; return; }
  script=$(job_script train.sh "exec '$RINGRUN' -- '$TRAIN'")
  job=$(submit -N4 --ntasks-per-node=2 "$script")
  state=$(wait_done "$job" 180)
  out=$OUT/job-$job.out
  [[ $state == "COMPLETED 0:0" ]] || fail "train job $job: '$state'"
  cluster_sum=$(sed -n 's/.*final ranks 8 weights checksum //p' "$out")
  [[ $cluster_sum == "$local_sum" ]] || fail "checksum 4 nodes x 2 ranks '$cluster_sum', ringrun -np 1 locally '$local_sum'"
  echo "allreduce: checksum $cluster_sum on 8 ranks over 4 namespace hosts, $local_sum with -np 1"
}

# Arguments and -x values reach every rank under srun exactly as given: srun's argv is built
# without a shell, and the values travel in the environment.
case_argv() {
  local -a args=('a b' "it's" '"q"' '$(touch '"$OUT"'/pwned)' '; rm -rf /' $'two\nlines' '*' '`id`' '&|' '--np')
  printf '%s\0' "${args[@]}" >"$OUT/args"
  printf '%s' $'x y;$(id)\n"z"' >"$OUT/xval"
  local script job state out r
  script=$(job_script argv.sh "mapfile -d '' args < '$OUT/args'" "x=\$(cat '$OUT/xval')" \
    "exec '$RINGRUN' -x \"ARGX=\$x\" -- /usr/bin/printf '<%s>\\n' \"\${args[@]}\"")
  job=$(submit -N2 --ntasks-per-node=1 "$script")
  state=$(wait_done "$job" 120)
  out=$OUT/job-$job.out
  [[ $state == "COMPLETED 0:0" ]] || fail "argv job $job: '$state'"
  printf '<%s>\n' "${args[@]}" >"$OUT/want"
  for r in 0 1; do
    sed -n "s/^\[$r\]<stdout>://p" "$out" >"$OUT/got.$r"
    cmp -s "$OUT/want" "$OUT/got.$r" || fail "argv rank $r: $(cat "$OUT/got.$r")"
  done
  [[ -e $OUT/pwned ]] && fail "an argument was run by a shell"
  # The -x value, newline and all, in every rank's environment.
  script=$(job_script argx.sh "exec '$RINGRUN' -x \"ARGX=\$(cat '$OUT/xval')\" -- /bin/sh -c 'printf %s \"\$ARGX\" > $OUT/argx.\$RANK'")
  job=$(submit -N2 --ntasks-per-node=1 "$script")
  state=$(wait_done "$job" 120)
  [[ $state == "COMPLETED 0:0" ]] || fail "argx job $job: '$state'"
  for r in 0 1; do cmp -s "$OUT/xval" "$OUT/argx.$r" || fail "-x value on rank $r: '$(cat "$OUT/argx.$r" 2>&1)'"; done
}

# Output (README, Using it): under srun and mpirun across nodes, every line of every rank whole and
# tagged once: lines over srun's 1024-byte cut, partial writes mpirun tags mid-line, bursts of short
# lines mpirun's --tag-output would drop, stdout and stderr interleaved, no final newline.
case_output_stress() {
  local script job state launcher stress=$HERE/../output_stress.py
  script=$(job_script stress.sh \
    "'$RINGRUN' -- /usr/bin/python3 '$stress' emit 150 >'$OUT/srun.out' 2>'$OUT/srun.err'; echo srun-exit=\$?" \
    "'$RINGRUN' --launcher mpirun -- /usr/bin/python3 '$stress' emit 150 >'$OUT/mpirun.out' 2>'$OUT/mpirun.err'; echo mpirun-exit=\$?")
  job=$(submit -N2 --ntasks-per-node=2 "$script")
  state=$(wait_done "$job" 180)
  [[ $state == "COMPLETED 0:0" ]] || fail "output stress job $job: '$state'"
  for launcher in srun mpirun; do
    grep -qx "$launcher-exit=0" "$OUT/job-$job.out" || fail "$launcher: $(grep "$launcher-exit" "$OUT/job-$job.out")"
    /usr/bin/python3 "$stress" check "$OUT/$launcher.out" "$OUT/$launcher.err" 4 150 ||
      fail "$launcher: output stress (stderr: $(grep -v '<std' "$OUT/$launcher.err" | head -3))"
  done
}

# A Horovod-style PyTorch script (ringrun.torch, DistributedOptimizer; README, PyTorch: coming from
# Horovod) across the 4 namespace hosts under srun and under mpirun trains like 4 ranks on one
# host: the same losses.
case_torch() {
  local example=$ROOT/runtime/examples/train_torch.py script job state launcher want got
  [[ -f $BUILD/python/ringrun/__init__.py ]] || skip "no Python binding in this build"
  /usr/bin/python3 -c 'import torch' 2>/dev/null || skip "torch is not importable by /usr/bin/python3"
  want=$("$RINGRUN" -np 4 --no-tag-output -- /usr/bin/python3 "$example" --epochs 2 | sed -n 's/^epoch 2: loss \([0-9.]*\).*/\1/p')
  [[ -n $want ]] || { fail "ringrun -np 4 $example printed no epoch 2 loss"; return; }
  # ringrun.run from the batch host: each node's rank returns its host name to this process,
  # through srun and through mpirun (use_mpi); pickle only (no cloudpickle for /usr/bin/python3).
  local run_call="import socket, sys; sys.path.insert(0, '$BUILD/python'); import ringrun; \
print('run-result', ringrun.run(socket.gethostname, num_proc=4, use_mpi=sys.argv[1] == 'mpi'))"
  script=$(job_script torch.sh \
    "'$RINGRUN' -- /usr/bin/python3 '$example' --epochs 2 >'$OUT/srun.out' 2>&1; echo srun-exit=\$?" \
    "'$RINGRUN' --launcher mpirun -- /usr/bin/python3 '$example' --epochs 2 >'$OUT/mpirun.out' 2>&1; echo mpirun-exit=\$?" \
    "/usr/bin/python3 -c \"$run_call\" srun 2>&1 | grep run-result" \
    "/usr/bin/python3 -c \"$run_call\" mpi 2>&1 | grep run-result")
  job=$(submit -N4 --ntasks-per-node=1 "$script")
  state=$(wait_done "$job" 240)
  [[ $state == "COMPLETED 0:0" ]] || fail "torch job $job: '$state'"
  [[ $(grep -c "^run-result \['n1', 'n2', 'n3', 'n4'\]$" "$OUT/job-$job.out") == 2 ]] ||
    fail "ringrun.run over 4 nodes (srun, then mpirun): $(grep -A3 run-result "$OUT/job-$job.out")"
  echo "ringrun.run under srun and mpirun: $(grep -m1 '^run-result' "$OUT/job-$job.out")"
  for launcher in srun mpirun; do
    grep -qx "$launcher-exit=0" "$OUT/job-$job.out" || fail "$launcher: $(grep "$launcher-exit" "$OUT/job-$job.out"): $(tail -5 "$OUT/$launcher.out")"
    got=$(sed -n 's/^\[0\]<stdout>:epoch 2: loss \([0-9.]*\) .*(4 ranks)$/\1/p' "$OUT/$launcher.out")
    [[ -n $got ]] || { fail "$launcher: no epoch 2 loss of 4 ranks: $(tail -5 "$OUT/$launcher.out")"; continue; }
    # The ring's summation order differs between shared memory and TCP: equal to a few ulps.
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(d < 0.002 && d > -0.002) }' ||
      fail "$launcher: epoch 2 loss $got over 4 hosts, $want with -np 4 on one host"
    echo "torch under $launcher: epoch 2 loss $got over 4 hosts ($want on one host)"
  done
}

# srun and mpirun launches print no launcher line that ringrun's own arguments provoke
# (srun's "cluster configuration lacks support for cpu binding" for --cpu-bind under task/none,
# its --ntasks-per-node warning for -np 3 in a --ntasks-per-node=2 job, Open MPI's help blocks):
# no [srun]/[mpirun] line, no untagged srun/mpirun message (the interface probe's step).
# --mem-bind local under srun and mpirun: every rank's memory policy binds to its cores' NUMA
# node (the task shim once asked hwloc, which sees no NUMA in the nodes' namespaces: ENOSYS).
case_mem_bind() {
  local script job state launcher
  script=$(job_script membind.sh \
    "'$RINGRUN' --mem-bind local -- sh -c 'head -1 /proc/self/numa_maps' >'$OUT/srun.out' 2>&1; echo srun-exit=\$?" \
    "'$RINGRUN' --launcher mpirun --mem-bind local -- sh -c 'head -1 /proc/self/numa_maps' >'$OUT/mpirun.out' 2>&1; echo mpirun-exit=\$?")
  job=$(submit -N2 --ntasks-per-node=2 "$script")
  state=$(wait_done "$job" 120)
  [[ $state == "COMPLETED 0:0" ]] || fail "mem_bind job $job: '$state'"
  for launcher in srun mpirun; do
    grep -qx "$launcher-exit=0" "$OUT/job-$job.out" || fail "$launcher --mem-bind local: $(cat "$OUT/$launcher.out")"
    [[ $(grep -cE '^\[[0-3]\]<stdout>:[0-9a-f]+ bind:0 ' "$OUT/$launcher.out") -eq 4 ]] ||
      fail "$launcher --mem-bind local: not every rank's memory bound to node 0: $(cat "$OUT/$launcher.out")"
  done
}

case_launcher_noise() {
  local -a launches=("" "--srun-mpi none" "-np 3" "--bind none --gpus-per-rank 0" "--launcher mpirun"
    "--launcher mpirun -np 3") sizes=(8 8 3 8 8 3) lines=()
  local i script job state out noise
  for i in "${!launches[@]}"; do
    lines+=("'$RINGRUN' ${launches[i]} -- /bin/sh -c 'echo \"hello \$RANK\"' >'$OUT/noise.$i' 2>&1; echo launch-$i-exit=\$?")
  done
  script=$(job_script noise.sh "${lines[@]}")
  job=$(submit -N4 --ntasks-per-node=2 --gpus-per-node=2 "$script")
  state=$(wait_done "$job" 180)
  [[ $state == "COMPLETED 0:0" ]] || fail "noise job $job: '$state'"
  for i in "${!launches[@]}"; do
    out=$OUT/noise.$i
    grep -qx "launch-$i-exit=0" "$OUT/job-$job.out" || fail "ringrun ${launches[i]}: $(grep "launch-$i-exit" "$OUT/job-$job.out")"
    [[ $(grep -c '^\[[0-9]*\]<stdout>:hello [0-9]*$' "$out") -eq ${sizes[i]} ]] ||
      fail "ringrun ${launches[i]}: not ${sizes[i]} hello lines: $(head -5 "$out")"
    noise=$(grep -E '^\[(srun|mpirun)\]|^(srun|mpirun|orted|prterun)(\.slurm)?: |^-{20,}$' "$out" | head -5 || true)
    [[ -z $noise ]] || fail "ringrun ${launches[i]}: launcher noise: $noise"
  done
  # The TaskPlugin was read once (scontrol) and remembered for this cluster.
  local cached
  cached=$(grep -lsF "conf $RINGRUN_CLUSTER_DIR/etc/slurm.conf" /tmp/ringrun-"$(id -u)"/slurm-task-plugin-* </dev/null |
    head -1 || true)
  [[ -n $cached && $(tail -1 "$cached") == task/none ]] ||
    fail "no cached TaskPlugin task/none for this cluster in /tmp/ringrun-$(id -u)"
}

# doctor --all-nodes inside an allocation: one step over the nodes, one table per node.
case_doctor() {
  local script job state out n
  script=$(job_script doctor.sh "'$RINGRUN' doctor --all-nodes; echo doctor-exit=\$?")
  job=$(submit -N4 --ntasks-per-node=1 "$script")
  state=$(wait_done "$job" 120)
  out=$OUT/job-$job.out
  [[ $state == "COMPLETED 0:0" ]] || fail "doctor job $job: '$state'"
  grep -qE '^doctor-exit=[01]$' "$out" || fail "doctor --all-nodes: $(grep doctor-exit "$out")"
  for n in n1 n2 n3 n4; do grep -q "^== $n ==" "$out" || fail "doctor --all-nodes: no table for $n"; done
  # Every node's JSON parsed (srun cuts long lines at 1024 bytes): no node reports unreadable output.
  grep -q "not doctor --json output" "$out" && fail "doctor --all-nodes: $(grep -m1 'not doctor --json output' "$out")"
  grep -qE '^(PASS|WARN|FAIL) +hostname' "$out" || fail "doctor --all-nodes: no checks in the tables: $(head -20 "$out")"
}

case_templates() {
  local name job state out script
  export PATH=$BUILD/bin:$PATH # the templates call 'ringrun'
  for name in single-node multi-node-srun multi-node-mpirun; do
    local nodes=2 gpn=2
    [[ $name == single-node ]] && nodes=1 gpn=4
    script=$OUT/$name.sbatch
    "$RINGRUN" template "$name" --nodes "$nodes" --gpus-per-node "$gpn" -- "$HERE/print_env.sh" >"$script"
    grep -q "^#SBATCH --nodes=$nodes$" "$script" || fail "template $name: no '#SBATCH --nodes=$nodes'"
    job=$(submit "$script")
    state=$(wait_done "$job" 120)
    out=$OUT/job-$job.out
    [[ $state == "COMPLETED 0:0" ]] || fail "template $name: job $job '$state'"
    local launcher=srun
    [[ $name == multi-node-mpirun ]] && launcher=mpirun
    local gpus=0,1,2,3
    ((gpn == 2)) && gpus=0,1
    check_ranks "$out" "$nodes" "$gpn" "$gpus" "template $name ($launcher)"
  done

  # preemptible: USR1 to the batch script -> ringrun -> every rank checkpoints and exits; the
  # script requeues the job; the next run resumes from the checkpoints and completes.
  script=$OUT/preemptible.sbatch
  "$RINGRUN" template preemptible --nodes 2 --gpus-per-node 2 -- "$HERE/preempt_prog.sh" >"$script"
  job=$(submit "$script")
  wait_running "$job"
  local ckdir=$OUT/checkpoints/$job deadline=$((SECONDS + 30))
  until (($(find "$ckdir" -name 'started-*' 2>/dev/null | wc -l) == 4)); do
    ((SECONDS < deadline)) || { fail "preemptible: ranks did not start in 30 s"; break; }
    sleep 0.1
  done
  run scancel --signal=USR1 --batch "$job"
  # The requeued job waits for Slurm's credential expiry (about 25 s here) before it runs again.
  state=$(wait_done "$job" 150)
  out=$OUT/job-$job.out
  [[ $state == "COMPLETED 0:0" ]] || fail "preemptible: job $job '$state', want 'COMPLETED 0:0'"
  [[ $(grep -c '<stdout>:checkpointed rank' "$out") -eq 4 ]] || fail "preemptible: not every rank checkpointed on USR1"
  [[ $(grep -c '<stdout>:resumed rank .* from epoch 1 restart 1' "$out") -eq 4 ]] ||
    fail "preemptible: not every rank resumed after the requeue"
  grep -q "requeueing job $job" "$out" || fail "preemptible: the script did not requeue"
}

# Ctrl-C to ringrun: the 8 ranks of its srun step stop within 2 s, not after --grace-period (srun
# passes one SIGINT on to its tasks only with --disable-status); the summary counts the ranks.
case_interrupt() {
  local script job deadline=$((SECONDS + 30))
  cp /bin/sleep "$OUT/sleeper"
  script=$(job_script interrupt.sh "exec '$RINGRUN' -- '$OUT/sleeper' 600")
  job=$(submit -N4 --ntasks-per-node=2 "$script")
  until (($(pgrep -fc "^$OUT/sleeper 600") >= 8)); do
    ((SECONDS < deadline)) || { fail "interrupt: only $(pgrep -fc "^$OUT/sleeper 600") of 8 ranks started in 30 s"; return; }
    sleep 0.1
  done
  interrupt_ringrun "$job" "-- $OUT/sleeper 600" "$OUT/sleeper" 8
}

run_case cluster_launcher
