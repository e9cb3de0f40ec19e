#!/usr/bin/env bash
# Elastic mode's supervisor with real processes whose ranks do not use the runtime: shell ranks
# that die, finish, leave or ask for a reset, reading and writing elastic mode's store keys through
# elastic_store.py as the runtime would. `elastic_supervisor.sh BUILD_DIR CASE`. Every case bounds
# its time and leaves no process behind (checked with pgrep on the case's folder, which every rank's
# command line names, and with kill -0 on the pids the ranks record).
set -uo pipefail
build=$1
case_name=$2
ringrun=$build/bin/ringrun
# -S: without site's imports python starts in tens of ms instead of hundreds on a loaded host.
python=$(command -v /usr/bin/python3 || command -v python3)
store="$python -S -E $(cd "$(dirname "$0")" && pwd)/elastic_store.py"
work=$(mktemp -d /tmp/ringrun-elastic.XXXXXX)
source "$(dirname "$0")/elastic_case.sh"
elastic_lines() { grep -c '^ringrun: elastic:' "$work/err"; }
# The rank program: $work/rank.sh, run by sh so that its command line names $work.
# `barrier N`: wait until N ranks called it (so that none ends the job before the others read).
rank() {
  printf '%s\n' 'id=$RINGRUN_ELASTIC_ID' "store=\"$store\"" "work=$work" \
    'barrier() { touch $work/barrier.$id; while [ $(ls $work | grep -c "^barrier[.]") -lt $1 ]; do sleep 0.02; done; }' \
    "$1" >"$work/rank.sh"
}
run() { "$ringrun" "$@" sh "$work/rank.sh" >"$work/out" 2>"$work/err"; }
host='[^ )]+'
mkdir -p "$work/pids"
[ -n "$python" ] || { echo "SKIP: python3 not found"; exit 77; }

case $case_name in
world_line)
  # A rank killed: world 1 is the others, the lowest survivor rank 0; the job goes on and ends 0.
  rank 'if [ $id = 2 ]; then kill -9 $$; fi
echo "w1 $($store get ringrun/elastic/1/world 20000) latest $($store get ringrun/elastic/latest)"
barrier 3'
  run -np 4 --min-np 2
  expect_rc $? 0
  has_line "ringrun: elastic: rank 2 \(id 2, host $host\) was killed by signal 9 \(SIGKILL\); world 1 has 3 ranks" err
  [ "$(elastic_lines)" -eq 1 ] || fail "expected one elastic line"
  for id in 0 1 3; do has_line "\[$id\]<stdout>:w1 e=1 added=0 ids=0,1,3 latest 1" out; done
  no_process_left
  ;;
refill)
  # With a cooldown the failed slot comes back: a new id, started for world 2 as its last rank.
  rank 'if [ $id = 1 ]; then kill -9 $$; fi
echo "start id=$id epoch=$RINGRUN_ELASTIC_EPOCH rank=$RANK size=$RINGRUN_SIZE world=$WORLD_SIZE timeout=$RINGRUN_ELASTIC_TIMEOUT"
echo "w2 $($store get ringrun/elastic/2/world 20000)"'
  run -np 3 --min-np 2 --blacklist-cooldown-range 1 1 --elastic-timeout 30
  expect_rc $? 0
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); world 1 has 2 ranks" err
  has_line "ringrun: elastic: slot 1 of host $host is back after its cooldown; world 2 has 3 ranks; id 3 starts as rank 2" err
  has_line "\[3\]<stdout>:start id=3 epoch=2 rank=2 size=3 world=3 timeout=30" out
  has_line "\[0\]<stdout>:start id=0 epoch=0 rank=0 size=3 world=3 timeout=30" out
  for id in 0 2 3; do has_line "\[$id\]<stdout>:w2 e=2 added=1 ids=0,2,3" out; done
  no_process_left
  ;;
leave_and_reset)
  # Id 1 posts its leave key and resets: world 1 is formed without it, and its exit 0 afterwards
  # does not end the job. Then a reset request with nothing changed: world 2 has the same ranks.
  rank 'echo "w0 $($store get ringrun/elastic/0/world 20000)"
if [ $id = 1 ]; then
  $store set ringrun/elastic/leave/1 1; $store set ringrun/elastic/0/reset 1
  echo "leaver sees $($store get ringrun/elastic/1/world 20000)"; exit 0
fi
echo "w1 $($store get ringrun/elastic/1/world 20000)"
if [ $id = 0 ]; then sleep 0.5; $store set ringrun/elastic/1/reset 0; fi
echo "w2 $($store get ringrun/elastic/2/world 20000) latest $($store get ringrun/elastic/latest)"
barrier 2'
  run -np 3 --min-np 1
  expect_rc $? 0
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) is leaving; world 1 has 2 ranks" err
  has_line "ringrun: elastic: a member of world 1 asked for a reset; world 2 has the same 2 ranks" err
  [ "$(elastic_lines)" -eq 2 ] || fail "expected two elastic lines"
  has_line "\[1\]<stdout>:w0 e=0 added=0 ids=0,1,2" out
  has_line "\[1\]<stdout>:leaver sees e=1 added=0 ids=0,2" out
  for id in 0 2; do has_line "\[$id\]<stdout>:w2 e=2 added=0 ids=0,2 latest 2" out; done
  no_process_left
  ;;
tombstone)
  # A rank dead before writing its address: its key of that world becomes the tombstone, so nobody
  # waits for it; a key the dead rank did write is left alone.
  rank 'case $id in
2) exit 5 ;;
1) $store get ringrun/elastic/1/world 20000 >/dev/null; $store set ringrun/elastic/1/addr/0/1 mine; exit 6 ;;
esac
echo "addr 0/2 $($store get ringrun/elastic/0/addr/0/2 20000)"
echo "w2 $($store get ringrun/elastic/2/world 20000)"
echo "addr 1/1 $($store get ringrun/elastic/1/addr/0/1)"'
  run -np 3 --min-np 1
  expect_rc $? 0
  has_line "ringrun: elastic: rank 2 \(id 2, host $host\) exited with code 5; world 1 has 2 ranks" err
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) exited with code 6; world 2 has 1 rank" err
  has_line '\[0\]<stdout>:addr 0/2 \\x1f!reset' out
  has_line "\[0\]<stdout>:w2 e=2 added=0 ids=0" out
  has_line "\[0\]<stdout>:addr 1/1 mine" out
  no_process_left
  ;;
finish)
  # A rank that exits 0 without leaving finishes the job: no new world (world 1 is the end), the
  # others get --grace-period to exit, then SIGTERM; exit 0 and no line of ringrun's.
  rank 'if [ $id = 1 ]; then exit 0; fi
echo $$ > $work/pids/$id
trap "echo term; exit 0" TERM
echo "w1 $($store get ringrun/elastic/1/world 20000)"
sleep 30 & echo $! > $work/pids/child.$id; wait'
  start=$(date +%s%N)
  run -np 3 --min-np 2 --grace-period 2
  rc=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc $rc 0
  grep -q '^ringrun' "$work/err" && fail "ringrun printed a line"
  for id in 0 2; do
    has_line "\[$id\]<stdout>:w1 end the job finished: rank 1 \(id 1, host $host\) exited with code 0" out
    has_line "\[$id\]<stdout>:term" out
  done
  [ "$elapsed" -ge 1900 ] || fail "the others were stopped after ${elapsed} ms, before the grace period"
  [ "$elapsed" -lt 15000 ] || fail "took ${elapsed} ms"
  no_process_left
  ;;
below_min)
  # Fewer slots than --min-np: the loss and the wait said at once, then after --elastic-timeout one
  # line, exit 1, nothing left.
  rank 'if [ $id = 1 ]; then kill -9 $$; fi
sleep 30 & echo $! > $work/pids/child.$id; wait'
  start=$(date +%s%N)
  run -np 3 --min-np 3 --elastic-timeout 2 --grace-period 1
  rc=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc $rc 1
  [ "$(elastic_lines)" -eq 2 ] || fail "expected exactly two elastic lines"
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); waiting for 3 slots \(have 2\) until [0-9]{2}:[0-9]{2}:[0-9]{2} \(--elastic-timeout 2 s\)" err
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); only 2 of the 3 slots --min-np needs became available within --elastic-timeout 2 s; add hosts or slots, lower --min-np or raise --elastic-timeout" err
  [ "$elapsed" -ge 1900 ] && [ "$elapsed" -lt 10000 ] || fail "ended after ${elapsed} ms (want 2 s to 10 s)"
  no_process_left
  ;;
reset_limit)
  # --reset-limit 1: the first death re-forms the world, the second ends the job.
  rank 'if [ $id = 1 ]; then kill -9 $$; fi
if [ $id = 2 ]; then $store get ringrun/elastic/1/world 20000 >/dev/null; exit 4; fi
sleep 30 & echo $! > $work/pids/child.$id; wait'
  run -np 4 --min-np 1 --reset-limit 1 --grace-period 1
  expect_rc $? 1
  has_line "ringrun: elastic: rank 1 \(id 1, host $host\) was killed by signal 9 \(SIGKILL\); world 1 has 3 ranks" err
  has_line "ringrun: elastic: rank 1 \(id 2, host $host\) exited with code 4; the job was reset 1 time, reaching --reset-limit 1; raise --reset-limit to allow more" err
  [ "$(elastic_lines)" -eq 2 ] || fail "expected two elastic lines"
  no_process_left
  ;;
interrupt)
  # SIGTERM to ringrun reaches every rank, the end is published for ranks waiting for a world,
  # and ringrun reports it as the normal supervisor does.
  rank 'on_term() { echo "term $($store get ringrun/elastic/1/world 5000)"; exit 0; }
trap on_term TERM
echo $$ > $work/pids/$id
sleep 30 & wait'
  "$ringrun" -np 3 --min-np 1 sh "$work/rank.sh" >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ "$(ls "$work/pids" | wc -l)" -eq 3 ] && break; sleep 0.05; done
  kill -TERM $rr
  wait $rr
  expect_rc $? 143
  has_line "ringrun: received SIGTERM; stopped 3 ranks" err
  for id in 0 1 2; do has_line "\[$id\]<stdout>:term end ringrun received SIGTERM" out; done
  no_process_left
  ;;
no_orphans_sigkill)
  # ringrun SIGKILLed after a refill: the guard still ends every rank and what a rank started,
  # the refilled one included (its group took a freed place in the guard's table).
  rank 'if [ $id = 1 ]; then kill -9 $$; fi
sleep 300 & echo $! > $work/pids/child.$id
echo $$ > $work/pids/$id; wait'
  "$ringrun" -np 3 --min-np 1 --blacklist-cooldown-range 1 1 sh "$work/rank.sh" >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ -f "$work/pids/3" ] && [ -f "$work/pids/child.3" ] && break; sleep 0.05; done
  [ -f "$work/pids/3" ] || fail "id 3 never started"
  kill -9 $rr
  wait $rr 2>/dev/null
  no_process_left
  ;;
*)
  echo "unknown case $case_name" >&2
  exit 2
  ;;
esac
echo "PASS [$case_name]"
