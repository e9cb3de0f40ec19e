# Shared by elastic_supervisor.sh and elastic_discovery.sh (sourced, after `work` and `case_name`
# are set): the case folder's cleanup and the checks. Processes are found by the case folder in
# their command lines, and by the pids that ranks record in $work/pids/ (when they do).
cleanup() {
  pkill -9 -f "$work" 2>/dev/null
  for f in "$work"/pids/*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL [$case_name]: $*" >&2
  echo "--- stdout"; cat "$work/out" 2>/dev/null; echo "--- stderr"; cat "$work/err" 2>/dev/null
  exit 1
}
expect_rc() { [ "$1" -eq "$2" ] || fail "exit status $1, expected $2 ${3:-}"; }
has_line() { grep -qE "^$1\$" "$work/$2" || fail "no line matching '$1' in $2"; }
count_lines() { grep -cE "^$1\$" "$work/$2"; }
no_process_left() {
  for _ in $(seq 60); do
    local alive=0
    pgrep -f "$work" >/dev/null && alive=1
    for f in "$work"/pids/*; do [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return 0
    sleep 0.05
  done
  fail "processes left: $(pgrep -af "$work") $(for f in "$work"/pids/*; do [ -f "$f" ] && ps -o pid=,args= -p "$(cat "$f")"; done)"
}
