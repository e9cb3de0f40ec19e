#!/bin/bash
# ringrun check-build / doctor through the real binary: layout, JSON shape, exit codes, --report
# redaction, --all-nodes outside and inside an allocation (a fake srun that runs each "node" here).
# Usage: cli_test.sh RINGRUN_BINARY. Exits 77 (skipped) while the subcommands are not wired.
set -u
ringrun=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

out=$("$ringrun" check-build 2>&1)
rc=$?
if [[ $out != "ringrun v"* ]]; then
  echo "SKIP: 'ringrun check-build' is not wired to run_check_build yet (exit $rc: ${out%%$'\n'*})"
  exit 77
fi
[ $rc -eq 0 ] || fail "check-build exited $rc, want 0"
for section in "Available APIs:" "Available launchers:" "Available transports:" "Topology:"; do
  grep -qx "$section" <<<"$out" || fail "check-build lacks the section '$section'"
done
while IFS= read -r line; do
  [[ $line == "    [ ] "*": "* ]] || fail "unchecked box without a reason on its line: '$line'"
done < <(grep -F '    [ ]' <<<"$out")
[ "$("$ringrun" --check-build 2>&1)" = "$out" ] || fail "--check-build differs from check-build"

json=$(env -u SLURM_JOB_ID -u SLURM_JOBID "$ringrun" doctor --json)
rc=$?
[[ $json == "["*"]" ]] || fail "doctor --json is not one array: ${json:0:80}"
grep -q '"name": "memlock", "status": "[A-Z]*", "detail": ' <<<"$json" || fail "doctor --json lacks the memlock check"
if grep -q '"status": "FAIL"' <<<"$json"; then want=1; else want=0; fi
[ $rc -eq $want ] || fail "doctor --json exited $rc, want $want"

"$ringrun" doctor --network-interface lo >"$work/lo.txt" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "doctor --network-interface lo exited $rc, want 1 (loopback FAILs)"
grep -q "^FAIL  network interface *'lo' is loopback" "$work/lo.txt" || fail "no loopback FAIL line: $(cat "$work/lo.txt")"

report=$(MY_API_TOKEN=hunter2 RINGRUN_JOB_SECRET=s3cret NCCL_DEBUG=INFO "$ringrun" doctor --report)
grep -q '^NCCL_DEBUG=INFO$' <<<"$report" || fail "--report lacks NCCL_DEBUG"
grep -q '^RINGRUN_JOB_SECRET=<redacted>$' <<<"$report" || fail "--report does not redact RINGRUN_JOB_SECRET"
grep -q 's3cret\|hunter2' <<<"$report" && fail "--report leaks a secret"

err=$(env -u SLURM_JOB_ID -u SLURM_JOBID "$ringrun" doctor --all-nodes 2>&1 >/dev/null)
rc=$?
[ $rc -eq 2 ] || fail "doctor --all-nodes outside SLURM exited $rc, want 2"
[ "$(wc -l <<<"$err")" -eq 1 ] && [[ $err == *"not inside a SLURM allocation"* ]] || fail "outside-SLURM error: '$err'"

mkdir -p "$work/bin"
cat >"$work/bin/srun" <<'SRUN'
#!/bin/sh
nodes=1
while [ $# -gt 0 ]; do
  case "$1" in --nodes=*) nodes=${1#--nodes=}; shift ;; --*) shift ;; *) break ;; esac
done
i=0
while [ $i -lt "$nodes" ]; do "$@" 2>&1 | sed "s/^/$i: /"; i=$((i + 1)); done
SRUN
chmod +x "$work/bin/srun"
tables=$(PATH="$work/bin:$PATH" SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='1(x2)' \
         "$ringrun" doctor --all-nodes)
rc=$?
grep -qx '== n1 ==' <<<"$tables" && grep -qx '== n2 ==' <<<"$tables" || fail "no table per node: ${tables:0:200}"
# Both fake nodes are this host: same hostname, which must FAIL.
grep -q "^FAIL  nodes n1, n2 all report hostname" <<<"$tables" || fail "shared hostname not flagged"
[ $rc -eq 1 ] || fail "doctor --all-nodes with a shared hostname exited $rc, want 1"

[ $status -eq 0 ] && echo "PASS: check-build and doctor through $ringrun"
exit $status
