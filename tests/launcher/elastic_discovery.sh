#!/usr/bin/env bash
# Elastic mode with --host-discovery-script on this host: the script prints what a file holds and
# the test rewrites the file. Growth and shrink use the runtime's real elastic rank
# (tests/runtime/elastic_rank.cpp: with FINAL_EPOCH it commits every 5 steps, sees the newer world
# and resets into it, or gets REMOVED and exits 0); the failure cases use shell ranks.
# `elastic_discovery.sh BUILD_DIR CASE`. Every case bounds its time and leaves no process behind
# (checked with pgrep on the case's folder, which the script's and ranks' command lines name).
set -uo pipefail
build=$1
case_name=$2
ringrun=$build/bin/ringrun
rank=$build/tests/runtime_elastic_rank
work=$(mktemp -d /tmp/ringrun-discovery.XXXXXX)
source "$(dirname "$0")/elastic_case.sh"
# Waits (up to 30 s: ranks start slowly on a loaded host) until `count` lines match in stdout.
wait_for() {
  for _ in $(seq 600); do
    [ "$(count_lines "$1" out)" -ge "$2" ] && return 0
    kill -0 "$rr" 2>/dev/null || fail "ringrun ended before $2 lines matching '$1'"
    sleep 0.05
  done
  fail "no $2 lines matching '$1' within 30 s"
}
# The discovery script: a file of its own, so that its command line names $work.
printf '%s\n' "cat $work/hosts" >"$work/discover.sh"
discover="sh $work/discover.sh"
host='[^ ;]+'
# A shell rank whose command line names $work.
printf '%s\n' 'sleep "$1"' >"$work/rank.sh"
# The cases with real ranks need the runtime's test rank (built with the runtime's tests).
need_rank() { [ -x "$rank" ] || { echo "SKIP: $rank not built"; exit 77; }; }

case $case_name in
grow)
  need_rank
  # 2 -> 3 slots: world 1 adds id 2 as rank 2 (added=1); the members reset into it, the joiner
  # syncs their step, and all three finish in world 1.
  echo localhost:2 >"$work/hosts"
  "$ringrun" -np 2 --min-np 2 --max-np 3 --host-discovery-script "$discover" "$rank" 99 0 40 1 \
    >"$work/out" 2>"$work/err" &
  rr=$!
  wait_for '\[[01]\]<stdout>:EPOCH id=[01] epoch=0 rank=[01] size=2 .*' 2
  echo localhost:3 >"$work/hosts"
  wait $rr
  expect_rc $? 0
  has_line "ringrun: elastic: host $host offers 3 slots instead of 2; world 1 has 3 ranks; id 2 starts as rank 2" err
  [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 1 ] || fail "expected one elastic line"
  for id in 0 1 2; do has_line "\[$id\]<stdout>:EPOCH id=$id epoch=1 rank=$id size=3 .*" out; done
  has_line '\[2\]<stdout>:JOINED id=2 step=[0-9]+' out
  [ "$(count_lines '\[[012]\]<stdout>:DONE id=[012] epoch=1 rank=[012] size=3 step=[0-9]+' out)" -eq 3 ] ||
    fail "expected three DONE lines in world 1"
  no_process_left
  ;;
shrink)
  need_rank
  # 3 -> 2 slots: world 1 leaves out id 2 (added=0); at its next commit it resets, is REMOVED and
  # exits 0 by itself (not SIGTERMed: it finalizes); the others finish in world 1; the job ends 0.
  echo localhost:3 >"$work/hosts"
  "$ringrun" --min-np 2 --host-discovery-script "$discover" "$rank" 99 0 40 1 >"$work/out" 2>"$work/err" &
  rr=$!
  wait_for '\[[012]\]<stdout>:EPOCH id=[012] epoch=0 rank=[012] size=3 .*' 3
  echo localhost:2 >"$work/hosts"
  wait $rr
  expect_rc $? 0
  has_line "ringrun: elastic: host $host offers 2 slots instead of 3; world 1 has 2 ranks; id 2 is removed \(exiting at its next commit\)" err
  [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 1 ] || fail "expected one elastic line"
  has_line '\[2\]<stdout>:REMOVED id=2 .*' out
  has_line '\[2\]<stdout>:FINAL id=2 .*' out
  for id in 0 1; do has_line "\[$id\]<stdout>:DONE id=$id epoch=1 rank=$id size=2 step=[0-9]+" out; done
  no_process_left
  ;;
start_wait)
  # The first run offers 1 slot, --min-np 2: one line, no process, runs every second; 2 slots
  # appear and the job starts with them and ends 0.
  echo localhost:1 >"$work/hosts"
  "$ringrun" --min-np 2 --elastic-timeout 30 --host-discovery-script "$discover" sh -c 'echo "rank $RINGRUN_RANK of $RINGRUN_SIZE"; sleep 0.5 # '"$work" \
    >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 100); do [ -s "$work/err" ] && break; sleep 0.05; done
  has_line "ringrun: elastic: --host-discovery-script '$discover' offers 1 slot of this host, fewer than the 2 the job starts with \(--min-np, else -np\); waiting up to 30 s \(--elastic-timeout\) for more" err
  sleep 1.5
  [ -s "$work/out" ] && fail "a rank started below --min-np: $(cat "$work/out")"
  echo localhost:2 >"$work/hosts"
  wait $rr
  expect_rc $? 0
  for r in 0 1; do has_line "\[$r\]<stdout>:rank $r of 2" out; done
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "expected one line on stderr: $(cat "$work/err")"
  no_process_left
  ;;
start_timeout)
  # Never enough slots (and a failing run on the way, said once): after --elastic-timeout one
  # line, exit 1, nothing started. SIGTERM during the wait ends it at once with 143.
  printf '%s\n' "n=\$(cat $work/n 2>/dev/null || echo 0); echo \$((n+1)) >$work/n" \
    'case $n in 1|2) exit 5 ;; *) echo localhost:1 ;; esac' >"$work/discover.sh"
  "$ringrun" --min-np 3 --elastic-timeout 4 --host-discovery-script "$discover" sh "$work/rank.sh" 5 \
    >"$work/out" 2>"$work/err"
  expect_rc $? 1
  has_line "ringrun: elastic: --host-discovery-script '$discover' failed \(exited with code 5\); retrying every second" err
  has_line "ringrun: elastic: only 1 of the 3 slots --min-np needs became available within --elastic-timeout 4 s; add hosts or slots, lower --min-np or raise --elastic-timeout; no process started" err
  [ "$(wc -l <"$work/err")" -eq 3 ] || fail "expected three lines: $(cat "$work/err")"
  [ -s "$work/out" ] && fail "a rank started"
  # A new file: the wait below must see this run's first line, not the last run's.
  rm -f "$work/err"
  "$ringrun" --min-np 3 --elastic-timeout 60 --host-discovery-script "$discover" sh "$work/rank.sh" 5 \
    >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 100); do [ -s "$work/err" ] && break; sleep 0.05; done
  kill -TERM $rr
  wait $rr
  expect_rc $? 143
  has_line "ringrun: elastic: SIGTERM while waiting for --min-np slots; no process started" err
  no_process_left
  ;;
first_failure)
  # The first run fails: a misconfiguration, one line, exit 2, nothing started.
  printf '%s\n' "echo broken >&2; exit 3 # $work" >"$work/discover.sh"
  "$ringrun" --min-np 1 --host-discovery-script "$discover" sh "$work/rank.sh" 5 >"$work/out" 2>"$work/err"
  expect_rc $? 2
  has_line 'broken' err
  has_line "ringrun: --host-discovery-script '$discover' : its first run exited with code 3; fix it to print host\[:slots\] lines and exit 0" err
  [ "$(wc -l <"$work/err")" -eq 2 ] || fail "expected the script's line and ringrun's"
  [ -s "$work/out" ] && fail "a rank started"
  no_process_left
  ;;
first_run_sigkill)
  # ringrun SIGKILLed while the script's first run (before any rank) hangs with a child: the guard
  # ends the script's group, child included.
  mkdir -p "$work/pids"
  printf '%s\n' "sleep 30 & echo \$! >$work/pids/child; wait # $work" >"$work/discover.sh"
  "$ringrun" --min-np 1 --host-discovery-script "$discover" sh "$work/rank.sh" 5 >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ -s "$work/pids/child" ] && break; sleep 0.05; done
  [ -s "$work/pids/child" ] || fail "the first run did not start its child"
  kill -KILL $rr
  wait $rr 2>/dev/null
  # The guard runs on ringrun's death; on a loaded machine it may take seconds to be scheduled.
  # A leak keeps the child for its 30 s: up to 10 s tells the two apart.
  for _ in $(seq 200); do kill -0 "$(cat "$work/pids/child")" 2>/dev/null || break; sleep 0.05; done
  no_process_left  # the script and its child (pids/child)
  ;;
foreign_host)
  # Another host at the first run: the job runs on the script's hosts through mpirun, each named
  # host checked before anything starts (exit 2). The cluster test runs such a job.
  printf 'localhost:1\nnot-this-host-7.invalid:4\n' >"$work/hosts"
  "$ringrun" --min-np 1 --host-discovery-script "$discover" sh "$work/rank.sh" 5 >"$work/out" 2>"$work/err"
  expect_rc $? 2
  has_line "ringrun: --host-discovery-script '$discover' : host 'not-this-host-7.invalid' does not resolve; fix the name, or add it to /etc/hosts or ~/.ssh/config" err
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "expected one line"
  # A dry run runs the script once and shows that run's plan: its hosts, through mpirun.
  printf 'localhost:1\n127.0.0.2:2\n' >"$work/hosts"
  "$ringrun" --dry-run --min-np 2 --host-discovery-script "$discover" sh "$work/rank.sh" 5 >"$work/out" 2>"$work/err"
  expect_rc $? 0
  has_line "command: mpirun .* -np 3 -H localhost:1,127\.0\.0\.2:2 .*" out
  no_process_left
  ;;
later_failures)
  # After the first run: failures keep the slots (one warning per run of failures), another host
  # is ignored (said once), a hung run is killed after 10 s; the job goes on and ends 0.
  printf '%s\n' "n=\$(cat $work/n 2>/dev/null || echo 0); echo \$((n+1)) >$work/n" \
    'case $n in 0) echo localhost:2 ;; 1|2) exit 4 ;; 3|4) printf "localhost:2\nother-host-9:2\n" ;;' \
    '5) while :; do sleep 0.1; done ;; *) echo localhost:2 ;; esac' >"$work/discover.sh"
  "$ringrun" --min-np 2 --host-discovery-script "$discover" sh "$work/rank.sh" 17 >"$work/out" 2>"$work/err"
  expect_rc $? 0
  has_line "ringrun: elastic: --host-discovery-script '$discover' failed \(exited with code 4\); keeping this host's 2 slots and retrying every second" err
  has_line "ringrun: elastic: --host-discovery-script '$discover' printed host 'other-host-9', which is not this host; ignored: the job's hosts are planned at its start \(start it with --launcher mpirun to let it grow onto other hosts\)" err
  has_line "ringrun: elastic: --host-discovery-script '$discover' failed \(did not finish within 10 s\); keeping this host's 2 slots and retrying every second" err
  [ "$(wc -l <"$work/err")" -eq 3 ] || fail "expected three lines"
  [ "$(cat "$work/n")" -ge 7 ] || fail "the script ran $(cat "$work/n") times, expected a run after the hung one"
  no_process_left
  ;;
interrupt_during_run)
  # ringrun interrupted while a run hangs: the script's group is killed and reaped with the ranks.
  printf '%s\n' "n=\$(cat $work/n 2>/dev/null || echo 0); echo \$((n+1)) >$work/n" \
    'if [ $n = 0 ]; then echo localhost:2; else while :; do sleep 0.1; done; fi' >"$work/discover.sh"
  "$ringrun" --min-np 2 --host-discovery-script "$discover" sh "$work/rank.sh" 30 >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ "$(cat "$work/n" 2>/dev/null)" = 2 ] && break; sleep 0.05; done
  sleep 0.3
  kill -TERM $rr
  wait $rr
  expect_rc $? 143
  has_line "ringrun: received SIGTERM; stopped 2 ranks" err
  no_process_left
  ;;
retire_escalation)
  # A removed process that does not use the runtime never learns it was removed: after
  # --grace-period it is SIGTERMed; that exit is no failure (no new world, no blacklist line).
  printf '%s\n' 'echo $$ >'"$work"'/pid.$RINGRUN_ELASTIC_ID; sleep "$1" & wait' >"$work/rank.sh"
  echo localhost:3 >"$work/hosts"
  "$ringrun" --min-np 2 --grace-period 1 --host-discovery-script "$discover" sh "$work/rank.sh" 10 \
    >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ -f "$work/pid.2" ] && break; sleep 0.05; done
  echo localhost:2 >"$work/hosts"
  for _ in $(seq 100); do grep -q 'id 2 is removed' "$work/err" && break; sleep 0.05; done
  sleep 3  # the grace period (1 s), and the SIGTERM's effect on a loaded host
  kill -0 "$(cat "$work/pid.2")" 2>/dev/null && fail "id 2 still runs 3 s after its grace period began"
  kill -0 "$(cat "$work/pid.0")" 2>/dev/null || fail "id 0 ended with id 2"
  wait $rr
  expect_rc $? 0
  has_line "ringrun: elastic: host $host offers 2 slots instead of 3; world 1 has 2 ranks; id 2 is removed \(exiting at its next commit\)" err
  [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 1 ] || fail "expected one elastic line"
  no_process_left
  ;;
below_min)
  need_rank
  # 3 -> 1 slot with --min-np 2: no world is published; after --elastic-timeout the end is, the
  # ranks are stopped (the existing below-min path), and ringrun ends with one line and exit 1.
  echo localhost:3 >"$work/hosts"
  "$ringrun" --min-np 2 --elastic-timeout 2 --host-discovery-script "$discover" "$rank" 99 0 40 1 \
    >"$work/out" 2>"$work/err" &
  rr=$!
  wait_for '\[[012]\]<stdout>:EPOCH id=[012] epoch=0 rank=[012] size=3 .*' 3
  echo localhost:1 >"$work/hosts"
  wait $rr
  expect_rc $? 1
  has_line "ringrun: elastic: host $host offers 1 slot instead of 3; waiting for 2 slots \(have 1\) until [0-9]{2}:[0-9]{2}:[0-9]{2} \(--elastic-timeout 2 s\)" err
  has_line "ringrun: elastic: host $host offers 1 slot instead of 3; only 1 of the 2 slots --min-np needs became available within --elastic-timeout 2 s; add hosts or slots, lower --min-np or raise --elastic-timeout" err
  [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 2 ] || fail "expected two elastic lines"
  no_process_left
  ;;
no_orphans_sigkill)
  # ringrun SIGKILLed while a run hangs: the guard ends the script's group like the ranks'.
  printf '%s\n' "n=\$(cat $work/n 2>/dev/null || echo 0); echo \$((n+1)) >$work/n" \
    'if [ $n = 0 ]; then echo localhost:2; else while :; do sleep 0.1; done; fi' >"$work/discover.sh"
  "$ringrun" --min-np 2 --host-discovery-script "$discover" sh "$work/rank.sh" 30 >"$work/out" 2>"$work/err" &
  rr=$!
  for _ in $(seq 200); do [ "$(cat "$work/n" 2>/dev/null)" = 2 ] && break; sleep 0.05; done
  sleep 0.3
  pgrep -f "sh $work/discover.sh" >/dev/null || fail "the second run is not running"
  kill -KILL $rr
  wait $rr
  no_process_left
  ;;
grow_then_shrink)
  need_rank
  # 2 -> 3 -> 2: the joiner of world 1 is the process removed in world 2; the fd and socket counts
  # of the members in world 2 equal world 0's (same size: nothing leaked by two resets).
  echo localhost:2 >"$work/hosts"
  "$ringrun" --min-np 2 --max-np 3 --host-discovery-script "$discover" "$rank" 99 0 40 2 >"$work/out" 2>"$work/err" &
  rr=$!
  wait_for '\[[01]\]<stdout>:EPOCH id=[01] epoch=0 rank=[01] size=2 .*' 2
  echo localhost:3 >"$work/hosts"
  wait_for '\[[012]\]<stdout>:EPOCH id=[012] epoch=1 rank=[012] size=3 .*' 3
  echo localhost:2 >"$work/hosts"
  wait $rr
  expect_rc $? 0
  has_line "ringrun: elastic: host $host offers 2 slots instead of 3; world 2 has 2 ranks; id 2 is removed \(exiting at its next commit\)" err
  [ "$(grep -c '^ringrun: elastic:' "$work/err")" -eq 2 ] || fail "expected two elastic lines"
  has_line '\[2\]<stdout>:REMOVED id=2 .*' out
  for id in 0 1; do
    has_line "\[$id\]<stdout>:DONE id=$id epoch=2 rank=$id size=2 step=[0-9]+" out
    counts() { grep -E "^\[$id\]<stdout>:EPOCH id=$id epoch=$1 " "$work/out" | grep -oE 'fds=[0-9]+ sockets=[0-9]+'; }
    [ "$(counts 0)" = "$(counts 2)" ] || fail "id $id: epoch 0 has $(counts 0), epoch 2 has $(counts 2)"
  done
  no_process_left
  ;;
*)
  echo "unknown case $case_name" >&2
  exit 2
  ;;
esac
echo "PASS [$case_name]"
