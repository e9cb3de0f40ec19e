#!/usr/bin/env bash
# Elastic mode end to end: the real launcher (`ringrun --min-np ...`) supervising real runtime
# ranks (elastic_rank.cpp, C API only) that die, leave and join. `elastic_launch.sh BUILD_DIR CASE`.
# Every case is bounded (timeout) and checks that no process is left: the rank binary runs through
# a link in the case's folder, so every rank's command line names that folder (pgrep -f).
set -uo pipefail
build=$1
case_name=$2
work=$(mktemp -d /tmp/ringrun-elastic-launch.XXXXXX)
cleanup() {
  pkill -9 -f "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ln -s "$build/tests/runtime_elastic_rank" "$work/elastic_rank"
fail() {
  echo "FAIL [$case_name]: $*" >&2
  echo "--- output"; cat "$work/out" 2>/dev/null
  exit 1
}
run() {
  local start=$SECONDS
  timeout -k 5 60 "$build/bin/ringrun" "$@" >"$work/out" 2>&1
  rc=$?
  elapsed=$((SECONDS - start))
  sed -i 's/^\[[0-9]*\]<stdout>://' "$work/out"
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"; }
has() { grep -qE "^$1\$" "$work/out" || fail "no line matching '$1'"; }
count() { grep -cE "^$1\$" "$work/out"; }
expect_count() { [ "$(count "$1")" -eq "$2" ] || fail "expected $2 lines matching '$1', found $(count "$1")"; }
# field ID EVENT EPOCH NAME: the NAME=value of process ID's EVENT line (EPOCH: epoch=E, or any).
field() {
  grep -E "^$2 id=$1 (epoch=$3 )?" "$work/out" | head -1 | grep -oE " $4=[0-9-]+" | cut -d= -f2
}
# A survivor keeps its pid and, in a world of the same size, its thread and socket counts.
same_process() {
  local id=$1 from=$2 to=$3
  [ "$(field "$id" EPOCH "$from" pid)" = "$(field "$id" EPOCH "$to" pid)" ] || fail "id $id changed pid"
  [ "$(field "$id" EPOCH "$from" threads)" = "$(field "$id" EPOCH "$to" threads)" ] ||
    fail "id $id threads $(field "$id" EPOCH "$from" threads) in epoch $from, $(field "$id" EPOCH "$to" threads) in $to"
}
no_leak_after_finalize() {
  for id in "$@"; do
    [ "$(field "$id" FINAL '' threads)" = "$(field "$id" START '' threads)" ] ||
      fail "id $id has $(field "$id" FINAL '' threads) threads after finalize, $(field "$id" START '' threads) before init"
    [ "$(field "$id" FINAL '' sockets)" = 0 ] || fail "id $id has sockets open after finalize"
    [ "$(field "$id" FINAL '' fds)" = "$(field "$id" START '' fds)" ] || fail "id $id leaks file descriptors"
  done
}
no_process_left() {
  for _ in $(seq 100); do
    pgrep -f "$work" >/dev/null || return 0
    sleep 0.05
  done
  fail "processes left: $(pgrep -af "$work")"
}
host='[^ )]+'
rank="$work/elastic_rank"

case $case_name in
shrink)
  # A rank SIGKILLed mid-allreduce: the survivors see RESET (not a peer error), keep their pids,
  # re-form a world of 3 in stable order (id 3 becomes rank 2) and finish; the job ends 0.
  run -np 4 --min-np 2 "$rank" 2 10 40
  expect_rc 0
  has "ringrun: elastic: rank 2 \(id 2, host $host\) was killed by signal 9 \(SIGKILL\); world 1 has 3 ranks"
  expect_count "RESET id=[013] code=-8 step=10 .*" 3
  has "EPOCH id=0 epoch=1 rank=0 size=3 .*"
  has "EPOCH id=1 epoch=1 rank=1 size=3 .*"
  has "EPOCH id=3 epoch=1 rank=2 size=3 .*"
  for id in 0 1 3; do same_process $id 0 1; done
  expect_count "DONE id=[013] epoch=1 rank=[012] size=3 step=40" 3
  no_leak_after_finalize 0 1 3
  ;;
shrink16)
  # The same at 16 ranks (oversubscribed here): 15 survivors finish in world 1. The recovery time
  # (death to the last survivor's first good step) is printed, not asserted: scripts/bench-elastic.
  run -np 16 --min-np 8 "$rank" 5 10 40
  expect_rc 0
  expect_count "DONE id=[0-9]+ epoch=1 rank=[0-9]+ size=15 step=40" 15
  died=$(grep -oE '^DYING id=5 t=[0-9]+' "$work/out" | cut -d= -f3)
  last=$(grep -oE '^RECOVERED id=[0-9]+ epoch=1 t=[0-9]+' "$work/out" | cut -d= -f4 | sort -n | tail -1)
  echo "recovery at 16 ranks: $(((last - died) / 1000000)) ms (load $(cut -d' ' -f1 /proc/loadavg))"
  ;;
refill)
  # A failed slot comes back after its cooldown: a new process (id 3) joins world 2 as rank 2 and
  # takes the members' step from rank 0; the survivors are back to world 0's size with the same
  # descriptors, threads and sockets (the torn-down worlds leaked nothing).
  run -np 3 --min-np 2 --blacklist-cooldown-range 1 1 "$rank" 1 10 40 2
  expect_rc 0
  has "ringrun: elastic: slot 1 of host $host is back after its cooldown; world 2 has 3 ranks; id 3 starts as rank 2"
  has "EPOCH id=3 epoch=2 rank=2 size=3 .*"
  joined=$(field 3 JOINED '' step)
  [ -n "$joined" ] && [ "$joined" -gt 10 ] || fail "the joiner did not take the members' step (JOINED step=$joined)"
  for id in 0 2; do
    same_process $id 0 2
    for what in fds sockets; do
      [ "$(field $id EPOCH 0 $what)" = "$(field $id EPOCH 2 $what)" ] || fail "id $id $what differ between worlds 0 and 2"
    done
  done
  expect_count "DONE id=[023] epoch=2 rank=[012] size=3 step=[0-9]+" 3
  no_leak_after_finalize 0 2 3
  ;;
leave)
  # A process asks to leave at a commit: it is removed (exit 0, no failure), the others see a host
  # update, not a reset error, and go on in a world of 2.
  ELASTIC_RANK_LEAVE=1:12 run -np 3 --min-np 2 "$rank" 9 0 40 1
  expect_rc 0
  has "ringrun: elastic: rank 1 \(id 1, host $host\) is leaving; world 1 has 2 ranks"
  has "REMOVED id=1 .*"
  expect_count "RESET id=.*" 0
  has "EPOCH id=2 epoch=1 rank=1 size=2 .*"
  expect_count "DONE id=[02] epoch=1 rank=[01] size=2 step=40" 2
  no_leak_after_finalize 0 1 2
  ;;
join_killed)
  # A joiner dies while the members wait for it in world 2's rendezvous: they get a reset, not a
  # 60 s timeout, and go on in world 3 without it.
  run -np 3 --min-np 2 --blacklist-cooldown-range 1 1 "$rank" 1,3 10,-1 40 3
  expect_rc 0
  has "ringrun: elastic: rank 2 \(id 3, host $host\) was killed by signal 9 \(SIGKILL\); world 3 has 2 ranks"
  expect_count "DONE id=[02] epoch=3 rank=[01] size=2 step=[0-9]+" 2
  [ "$elapsed" -lt 30 ] || fail "took $elapsed s"
  ;;
rank0_timeline)
  # Rank 0 itself dies: the lowest survivor (id 1) becomes rank 0 and continues the one timeline
  # file after a mark; the file stays valid JSON with both worlds in it.
  run -np 3 --min-np 2 --timeline-filename "$work/timeline.json" "$rank" 0 10 40
  expect_rc 0
  has "EPOCH id=1 epoch=1 rank=0 size=2 .*"
  expect_count "DONE id=[12] epoch=1 rank=[01] size=2 step=40" 2
  /usr/bin/python3 - "$work/timeline.json" <<'PY' || fail "the timeline is not one file with both worlds"
import json, sys
events = json.load(open(sys.argv[1]))
marks = [e["name"] for e in events if e.get("ph") == "i" and e.get("s") == "p"]
assert marks == ["elastic world 0: 3 ranks", "elastic world 1: 2 ranks"], marks
spans = [e for e in events if e.get("ph") == "X"]
assert any(e["tid"] < 100000 for e in spans) and any(e["tid"] > 100000 for e in spans), "spans of one world only"
PY
  ;;
below_min)
  # Below --min-np with no slot coming back: the loss and the wait said at once, one line after
  # --elastic-timeout, exit 1, nothing left.
  run -np 3 --min-np 3 --elastic-timeout 2 "$rank" 1 10 40
  expect_rc 1
  expect_count "ringrun: elastic: .*" 2
  has "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); waiting for 3 slots \(have 2\) until [0-9]{2}:[0-9]{2}:[0-9]{2} \(--elastic-timeout 2 s\)"
  has "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); only 2 of the 3 slots --min-np needs became available within --elastic-timeout 2 s; .*"
  [ "$elapsed" -lt 15 ] || fail "took $elapsed s"
  ;;
reset_limit)
  # The second death would be the second reset: --reset-limit 1 ends the job with one line.
  run -np 4 --min-np 2 --reset-limit 1 "$rank" 1,2 10,20 40
  expect_rc 1
  has "ringrun: elastic: rank [0-9] \(id 2, host $host\) was killed by signal 9 \(SIGKILL\); the job was reset 1 time, reaching --reset-limit 1; .*"
  ;;
*)
  echo "unknown case $case_name" >&2
  exit 2
  ;;
esac
no_process_left
echo "ok [$case_name] in ${elapsed} s"
