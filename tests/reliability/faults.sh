#!/usr/bin/env bash
# Fault injection and security checks with real processes: `faults.sh BUILD_DIR CASE`.
# Every case bounds its own time and leaves nothing behind: the EXIT trap kills every process the
# case started (recorded pids, ringrun's process group) and removes the namespaces it created.
# Exit 77 = skipped (the reason is printed): not root, no `ip netns`, no mpirun.
set -uo pipefail
build=$1
case_name=$2
ringrun=$build/bin/ringrun
rank=$build/tests/reliability_fault_rank
attack=$build/tests/reliability_store_attack
work=$(mktemp -d /tmp/ringrun-faults.XXXXXX)
netns_prefix=rrfault$$
cleanup() {
  for f in "$work"/pids/* "$work"/bg/*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  for ns in "${netns_prefix}a" "${netns_prefix}b"; do
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
      ip netns delete "$ns" 2>/dev/null
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }
skip() { echo "SKIP [$case_name]: $*"; exit 77; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
mkdir -p "$work/pids" "$work/bg"
export FAULT_PID_DIR=$work/pids

wait_for_pids() {  # wait_for_pids N SECONDS: until N ranks wrote their pid
  local i
  for i in $(seq $(($2 * 20))); do
    [ "$(ls "$work/pids" | grep -c '^[0-9]*$')" -ge "$1" ] && return 0
    sleep 0.05
  done
  return 1
}
alive_ranks() {  # ranks recorded under pids/ still running
  local n=0 f
  for f in "$work"/pids/[0-9]*; do [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && n=$((n + 1)); done
  echo $n
}
rank_env() {  # rank_env RANK NAME: a variable of a running rank, from /proc
  tr '\0' '\n' <"/proc/$(cat "$work/pids/$1")/environ" | sed -n "s/^$2=//p"
}

case $case_name in
rank_sigkill)
  # SIGKILL of one rank mid-allreduce: every other rank fails (or is stopped) within 5 s, and
  # ringrun exits with the summary line naming the killed rank.
  "$ringrun" -np 4 --grace-period 2 "$rank" loop 60 >"$work/out" 2>"$work/err" &
  echo $! >"$work/bg/ringrun"
  wait_for_pids 4 30 || fail "ranks did not start: $(cat "$work/err")"
  sleep 0.5
  killed_at=$(now_ms)
  kill -9 "$(cat "$work/pids/2")"
  wait "$(cat "$work/bg/ringrun")"
  rc=$?
  elapsed=$(($(now_ms) - killed_at))
  [ $rc -eq 137 ] || fail "ringrun exited $rc, expected 137: $(tail -n 3 "$work/err")"
  [ $elapsed -lt 5000 ] || fail "ringrun took $elapsed ms after the SIGKILL"
  grep -qE '^ringrun: rank 2 \(host .+\) was killed by signal 9 \(SIGKILL\); stopped 3 other ranks$' "$work/err" ||
    fail "summary line: $(cat "$work/err")"
  [ "$(alive_ranks)" -eq 0 ] || fail "ranks alive after ringrun exited"
  # Ranks that noticed the death themselves name a peer and did so quickly.
  while read -r line; do
    ms=$(echo "$line" | sed -n 's/.*failed after \([0-9]*\) ms.*/\1/p')
    [ -z "$ms" ] || [ "$ms" -lt 5000 ] || fail "a rank noticed after $ms ms: $line"
  done < <(grep 'failed after' "$work/out")
  echo "ringrun exited ${elapsed} ms after the SIGKILL; $(grep -c 'failed after' "$work/out") ranks reported it"
  ;;
late_rank)
  # A rank that never reaches ringrun_init(): the others' start timeout names it.
  start=$(now_ms)
  timeout 60 "$ringrun" -np 3 --start-timeout 2 "$rank" late 30 >"$work/out" 2>"$work/err"
  rc=$?
  elapsed=$(($(now_ms) - start))
  [ $rc -ne 0 ] || fail "the job succeeded without rank 1"
  [ $rc -ne 124 ] || fail "ringrun hung"
  grep 'ringrun_init failed' "$work/err" | grep -q 'rendezvous: rank 1 never arrived' ||
    fail "the start timeout does not name rank 1: $(cat "$work/err")"
  [ $elapsed -lt 20000 ] || fail "took $elapsed ms with a 2 s start timeout"
  echo "failed after $elapsed ms: $(grep -m1 'ringrun_init failed' "$work/err")"
  ;;
ringrun_sigkill)
  # ringrun itself SIGKILLed while runtime ranks are in allreduces: no rank survives it.
  "$ringrun" -np 3 "$rank" loop 60 >"$work/out" 2>"$work/err" &
  rr=$!
  echo $rr >"$work/bg/ringrun"
  wait_for_pids 3 30 || fail "ranks did not start: $(cat "$work/err")"
  kill -9 $rr
  wait $rr 2>/dev/null
  for _ in $(seq 100); do [ "$(alive_ranks)" -eq 0 ] && break; sleep 0.05; done
  [ "$(alive_ranks)" -eq 0 ] || fail "$(alive_ranks) ranks survived ringrun's SIGKILL"
  ;;
shm_full)
  # /dev/shm full: a clear message and the job runs over TCP instead.
  [ "$(id -u)" -eq 0 ] || skip "needs root for a private /dev/shm (unshare -m)"
  command -v unshare >/dev/null || skip "unshare missing"
  unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$@"' sh \
    timeout 60 "$ringrun" -np 2 "$rank" loop 1 >"$work/out" 2>"$work/err"
  rc=$?
  [ $rc -eq 0 ] || fail "the job failed (exit $rc) instead of falling back: $(cat "$work/err")"
  grep -q 'shared memory unusable (cannot reserve .* No space left on device); ranks on this host use TCP instead' \
    "$work/err" || fail "no clear message about /dev/shm: $(cat "$work/err")"
  [ "$(grep -c 'ok after' "$work/out")" -eq 2 ] || fail "ranks: $(cat "$work/out")"
  # /dev/shm not writable at all (read-only): the same.
  unshare -m sh -c 'mount -t tmpfs -o ro tmpfs /dev/shm && exec "$@"' sh \
    timeout 60 "$ringrun" -np 2 "$rank" loop 1 >"$work/out" 2>"$work/err"
  [ $? -eq 0 ] || fail "read-only /dev/shm: $(cat "$work/err")"
  grep -q 'shared memory unusable (cannot create /dev/shm.*Read-only file system)' "$work/err" ||
    fail "read-only /dev/shm message: $(cat "$work/err")"
  ;;
port_taken)
  # MASTER_PORT already in use: rank 0 cannot host the store and says so at once, naming the port.
  python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' \
    >"$work/port" &
  echo $! >"$work/bg/holder"
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  port=$(cat "$work/port")
  start=$(now_ms)
  RINGRUN_RANK=0 RINGRUN_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RINGRUN_START_TIMEOUT=5 \
    timeout 30 "$rank" loop 1 >"$work/out" 2>"$work/err"
  rc=$?
  elapsed=$(($(now_ms) - start))
  [ $rc -eq 2 ] || fail "rank 0 exited $rc, expected 2 (init failed): $(cat "$work/err")"
  grep -q "$port" "$work/err" && grep -qi 'in use' "$work/err" ||
    fail "the error does not name the port in use: $(cat "$work/err")"
  [ $elapsed -lt 3000 ] || fail "took $elapsed ms to report a port in use"
  echo "$(cat "$work/err")"
  ;;
netns_cut)
  # Two hosts (network namespaces joined by a veth pair), one rank in each; the link goes down
  # mid-run: the other rank fails within a bounded time, naming its peer.
  [ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
  ip netns list >/dev/null 2>&1 || skip "no 'ip netns'"
  a=${netns_prefix}a b=${netns_prefix}b
  ip netns add "$a" && ip netns add "$b" || skip "cannot create network namespaces"
  ip link add "${netns_prefix}x" netns "$a" type veth peer name "${netns_prefix}y" netns "$b" ||
    skip "cannot create a veth pair"
  ip -n "$a" addr add 10.200.0.1/24 dev "${netns_prefix}x" && ip -n "$a" link set "${netns_prefix}x" up &&
    ip -n "$a" link set lo up || fail "namespace $a setup"
  ip -n "$b" addr add 10.200.0.2/24 dev "${netns_prefix}y" && ip -n "$b" link set "${netns_prefix}y" up &&
    ip -n "$b" link set lo up || fail "namespace $b setup"
  common=(RINGRUN_SIZE=2 MASTER_ADDR=10.200.0.1 MASTER_PORT=29555 RINGRUN_JOB_SECRET=netns-test-secret
          RINGRUN_START_TIMEOUT=20 RINGRUN_PEER_TIMEOUT=3 FAULT_PID_DIR="$work/pids")
  ip netns exec "$a" env "${common[@]}" RINGRUN_RANK=0 RINGRUN_HOSTNAME=host-a "$rank" loop 60 \
    >"$work/out.0" 2>"$work/err.0" &
  echo $! >"$work/bg/rank0"
  ip netns exec "$b" env "${common[@]}" RINGRUN_RANK=1 RINGRUN_HOSTNAME=host-b "$rank" loop 60 \
    >"$work/out.1" 2>"$work/err.1" &
  echo $! >"$work/bg/rank1"
  wait_for_pids 2 30 || fail "ranks did not start: $(cat "$work/err.0" "$work/err.1")"
  sleep 0.5
  cut_at=$(now_ms)
  ip -n "$b" link set "${netns_prefix}y" down
  wait "$(cat "$work/bg/rank0")"
  rc=$?
  elapsed=$(($(now_ms) - cut_at))
  [ $rc -eq 3 ] || fail "rank 0 exited $rc: $(cat "$work/out.0" "$work/err.0")"
  grep -q 'rank 1 (host host-b)' "$work/out.0" || fail "the error does not name the peer: $(cat "$work/out.0")"
  [ $elapsed -lt 15000 ] || fail "rank 0 noticed the cut after $elapsed ms"
  echo "rank 0 failed ${elapsed} ms after the cut: $(cat "$work/out.0")"
  ;;
store_attack)
  # Strangers attack the store of a running job: nothing is disclosed, the store's memory stays
  # bounded, and the job's ranks still complete.
  "$ringrun" -np 2 "$rank" loop 25 >"$work/out" 2>"$work/err" &
  rr=$!
  echo $rr >"$work/bg/ringrun"
  wait_for_pids 2 30 || fail "ranks did not start: $(cat "$work/err")"
  store=$(rank_env 0 RINGRUN_STORE_ADDR)
  secret=$(rank_env 0 RINGRUN_JOB_SECRET)
  [ -n "$store" ] && [ ${#secret} -ge 32 ] || fail "store '$store' or secret of ${#secret} chars"
  rss_before=$(awk '/^VmRSS/ {print $2}' /proc/$rr/status)
  STORE_ATTACK_HOLD_SECONDS=2 "$attack" "$store" >"$work/attack" 2>&1 &
  ap=$!
  echo $ap >"$work/bg/attack"
  sleep 16  # the attacks take ~13 s, then 300 strangers are held open for 2 s
  rss_during=$(awk '/^VmRSS/ {print $2}' /proc/$rr/status)
  wait $ap
  arc=$?
  cat "$work/attack"
  [ $arc -eq 0 ] || fail "the store answered a stranger: $(grep FAIL "$work/attack")"
  grep -qF -- "$secret" "$work/attack" && fail "the secret appeared in the attack's output"
  growth=$((rss_during - rss_before))
  [ $growth -lt 32768 ] || fail "ringrun's memory grew by $growth KiB under attack"
  wait $rr
  rc=$?
  [ $rc -eq 0 ] || fail "the job failed under attack (exit $rc): $(tail -n 5 "$work/err")"
  [ "$(grep -c 'ok after' "$work/out")" -eq 2 ] || fail "ranks: $(cat "$work/out")"
  grep -q 'ringrun store: refused connection' "$work/err" || fail "refusals were not reported"
  echo "ringrun's RSS grew by $growth KiB with 300 strangers connected"
  ;;
secret_not_in_ps)
  # The per-job secret is on no command line, under the local backend and under mpirun.
  check_ps() {  # check_ps LABEL RINGRUN_ARGS...
    local label=$1
    shift
    rm -f "$work"/pids/*
    "$ringrun" "$@" "$rank" loop 6 >"$work/out" 2>"$work/err" &
    local rr=$!
    echo $rr >"$work/bg/ringrun"
    wait_for_pids 2 60 || fail "$label: ranks did not start: $(cat "$work/err")"
    local secret
    secret=$(rank_env 0 RINGRUN_JOB_SECRET)
    [ ${#secret} -ge 32 ] || fail "$label: secret of ${#secret} chars"
    ps -eo args >"$work/ps"
    grep -qF -- "$secret" "$work/ps" && fail "$label: the secret is on a command line: $(grep -F -- "$secret" "$work/ps")"
    grep -qF -- "$rank loop 6" "$work/ps" || fail "$label: ps shows no rank: $(cat "$work/ps")"
    # No process's command line at all (not only ps's view of it) holds the secret.
    for p in /proc/[0-9]*; do
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$secret" && fail "$label: secret in $p/cmdline"
    done
    wait $rr || fail "$label: the job failed: $(tail -n 3 "$work/err")"
    echo "$label: secret of ${#secret} chars in no command line"
  }
  check_ps "local" -np 2
  if command -v mpirun >/dev/null; then
    check_ps "mpirun" --launcher mpirun -H localhost:2 -x FAULT_PID_DIR
  else
    echo "mpirun missing: only the local backend checked"
  fi
  ;;
listen_address)
  # For a local run, the store and the ranks' sockets listen on loopback only.
  "$ringrun" -np 2 "$rank" loop 6 >"$work/out" 2>"$work/err" &
  rr=$!
  echo $rr >"$work/bg/ringrun"
  wait_for_pids 2 30 || fail "ranks did not start: $(cat "$work/err")"
  store=$(rank_env 0 RINGRUN_STORE_ADDR)
  case $store in 127.0.0.1:*) ;; *) fail "RINGRUN_STORE_ADDR=$store for a local run" ;; esac
  ss -ltnpH >"$work/ss"
  grep -F "pid=$rr," "$work/ss" >"$work/ss.ringrun" || fail "ringrun listens nowhere: $(cat "$work/ss")"
  grep -vq ' 127\.0\.0\.1:' "$work/ss.ringrun" && fail "ringrun listens beyond loopback: $(cat "$work/ss.ringrun")"
  for r in 0 1; do
    grep -F "pid=$(cat "$work/pids/$r")," "$work/ss" | grep -v ' 127\.0\.0\.1:' | grep -q . &&
      fail "rank $r listens beyond loopback: $(grep -F "pid=$(cat "$work/pids/$r")," "$work/ss")"
  done
  wait $rr || fail "the job failed: $(tail -n 3 "$work/err")"
  cat "$work/ss.ringrun"
  # Started without ringrun (MASTER_ADDR=127.0.0.1), rank 0 hosts the store on that address only.
  rm -f "$work"/pids/*
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for r in 0 1; do
    RINGRUN_RANK=$r RINGRUN_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$rank" loop 4 >"$work/out.$r" 2>&1 &
    echo $! >"$work/bg/rank$r"
  done
  wait_for_pids 2 30 || fail "MASTER_ADDR ranks did not start: $(cat "$work"/out.*)"
  ss -ltnH "sport = :$port" >"$work/ss.master"
  grep -q "127.0.0.1:$port" "$work/ss.master" || fail "store for MASTER_ADDR=127.0.0.1: $(cat "$work/ss.master")"
  for r in 0 1; do wait "$(cat "$work/bg/rank$r")" || fail "MASTER_ADDR rank $r: $(cat "$work/out.$r")"; done
  echo "MASTER_ADDR store: $(cat "$work/ss.master")"
  ;;
mpirun_argv)
  # Arguments and -x values reach the ranks through mpirun as argv, never through a shell.
  command -v mpirun >/dev/null || skip "mpirun missing"
  weird="sp ace \"dq\" 'sq' \$(touch $work/pwned-env) \`touch $work/pwned-bt\`; echo x"$'\n'"line2 & | > <"
  args=('a b' "it's" '"q"' '$(touch '"$work"'/pwned)' '; touch '"$work"'/pwned2' $'two\nlines' '*' '' '-x' '$HOME' '\\')
  # Each rank writes its environment to a file of its own: through mpirun's shared stdout the two
  # ranks' output interleaves in chunks, and a chunk boundary at the newline inside the value
  # once split it. (The shell only redirects; the value reaches it through the environment.)
  timeout 60 "$ringrun" --launcher mpirun -H localhost:2 --no-tag-output -x "WEIRD=$weird" -- \
    /bin/sh -c 'exec /usr/bin/env -0 >"$0.$OMPI_COMM_WORLD_RANK"' "$work/env" 2>"$work/err"
  [ $? -eq 0 ] || fail "env under mpirun: $(cat "$work/err")"
  printf '%s\n' "WEIRD=$weird" >"$work/weird.want"
  for r in 0 1; do
    [ -f "$work/env.$r" ] || fail "rank $r wrote no environment: $(cat "$work/err")"
    tr '\0' '\n' <"$work/env.$r" | grep -A1 '^WEIRD=' | head -n 2 >"$work/weird.got"
    cmp -s "$work/weird.got" "$work/weird.want" || fail "-x value changed on rank $r: $(cat -A "$work/weird.got")"
  done
  timeout 60 "$ringrun" --launcher mpirun -H localhost:2 --no-tag-output -- /usr/bin/printf '<%s>\n' "${args[@]}" \
    >"$work/out" 2>"$work/err"
  [ $? -eq 0 ] || fail "printf under mpirun: $(cat "$work/err")"
  /usr/bin/printf '<%s>\n' "${args[@]}" "${args[@]}" | sort >"$work/want"
  sort "$work/out" >"$work/got"
  cmp -s "$work/got" "$work/want" || fail "arguments changed: $(diff "$work/got" "$work/want")"
  for f in pwned pwned2 pwned-env pwned-bt; do [ -e "$work/$f" ] && fail "a shell ran part of an argument ($f)"; done
  # srun: only with the test cluster.
  echo "mpirun: ${#args[@]} arguments and a -x value with shell syntax arrived unchanged"
  ;;
*)
  fail "unknown case"
  ;;
esac
exit 0
