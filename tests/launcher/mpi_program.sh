#!/usr/bin/env bash
# An MPI program started by ringrun gets one MPI world (ringrun(1), MPI PROGRAMS). `mpi_program.sh
# BUILD_DIR`. A 10-line MPI program (compiled here with mpicc) under --launcher auto (local ->
# mpirun by itself), explicit mpirun, and explicit local (singletons, reported once); Python
# programs that name mpi4py are planned for mpirun; a plain program stays local. Every run bounded
# by timeout.
set -uo pipefail
ringrun=$1/bin/ringrun
command -v mpicc >/dev/null && command -v mpirun >/dev/null || { echo "SKIP: mpicc or mpirun missing"; exit 77; }
work=$(mktemp -d /tmp/ringrun-mpi-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work/tmp   # the singleton watch's directory lands here without /dev/shm: checked to be gone
mkdir -p "$TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }
cat >"$work/mpi_hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  int rank, size, one = 1, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("mpi rank %d of %d sum %d\n", rank, size, sum);
  return MPI_Finalize();
}
C
mpicc -o "$work/mpi_hello" "$work/mpi_hello.c" || fail "mpicc failed"
cd "$work" || exit 1

world_of_two() { # label: both ranks in one world of 2, the allreduce over both
  for r in 0 1; do
    grep -qx "\[$r\]<stdout>:mpi rank $r of 2 sum 2" out || fail "$1: rank $r: $(cat out err)"
  done
}

# --launcher auto: the program links libmpi, so ringrun starts it under mpirun by itself.
timeout 60 "$ringrun" -np 2 ./mpi_hello >out 2>err || fail "auto: exit $?: $(cat err)"
world_of_two "auto"
grep -q "hint" err && fail "auto: a singleton hint under mpirun: $(cat err)"
"$ringrun" -np 2 --dry-run --json ./mpi_hello | grep -q '^{"launcher": "mpirun"' || fail "auto: the plan is not mpirun"
timeout 60 "$ringrun" -np 2 -v ./mpi_hello >out 2>err || fail "auto -v: exit $?"
grep -q "^ringrun: launcher mpirun: './mpi_hello' links libmpi" err || fail "auto -v: no reason: $(cat err)"

# Explicit mpirun: the same world.
timeout 60 "$ringrun" --launcher mpirun -np 2 ./mpi_hello >out 2>err || fail "mpirun: exit $?: $(cat err)"
world_of_two "mpirun"

# Explicit local: two singletons, and one hint line saying so after the job.
timeout 60 "$ringrun" --launcher local -np 2 ./mpi_hello >out 2>err || fail "local: exit $?: $(cat err)"
[ "$(grep -c 'mpi rank 0 of 1 sum 1' out)" -eq 2 ] || fail "local: not two singletons: $(cat out)"
[ "$(grep -c '^ringrun: hint: the ranks initialized MPI as singletons' err)" -eq 1 ] || fail "local: hint: $(cat err)"
# Not MPI: no hint, and the plan stays local.
timeout 30 "$ringrun" --launcher local -np 2 true 2>err || fail "true: exit $?"
[ -s err ] && fail "a hint for a program without MPI: $(cat err)"
"$ringrun" -np 2 --dry-run --json sh -c true | grep -q '^{"launcher": "local"' || fail "sh: not local"
# mpirun missing from PATH: the plan stays local, with one warning line before any start (Open
# MPI's singletons themselves need ssh in PATH, so the plan is what is checked here).
mkdir -p nompi
timeout 30 env PATH="$work/nompi" "$ringrun" -np 2 --dry-run --json ./mpi_hello >out 2>err || fail "no mpirun: exit $?"
grep -q '^{"launcher": "local"' out || fail "no mpirun: not local: $(head -c 200 out)"
[ "$(wc -l <err)" -eq 1 ] && grep -q "^ringrun: warning: './mpi_hello' links libmpi.* but mpirun is not in PATH" err ||
  fail "no mpirun: $(cat err)"

# Python: -m mpi4py, a script that imports mpi4py, a script run through its #! line (plans only:
# mpi4py need not be installed for ringrun to see it named).
printf 'import os\nfrom mpi4py import MPI\n' >uses_mpi.py
printf '#!/usr/bin/env python3\nimport sys, mpi4py\n' >shebang_mpi.py && chmod +x shebang_mpi.py
printf 'print("no mpi here")\n' >plain.py
plan_launcher() { "$ringrun" -np 2 --dry-run --json "$@" | sed -n 's/^{"launcher": "\([a-z]*\)".*/\1/p'; }
[ "$(plan_launcher python3 -m mpi4py plain.py)" = mpirun ] || fail "python3 -m mpi4py: not mpirun"
[ "$(plan_launcher python3 -u uses_mpi.py)" = mpirun ] || fail "python3 uses_mpi.py: not mpirun"
[ "$(plan_launcher ./shebang_mpi.py)" = mpirun ] || fail "./shebang_mpi.py: not mpirun"
[ "$(plan_launcher python3 plain.py)" = local ] || fail "python3 plain.py: not local"
[ "$(plan_launcher --launcher local python3 uses_mpi.py)" = local ] || fail "--launcher local was not kept"

# Nothing left behind: no watch directory, no rank.
[ -z "$(ls -A "$TMPDIR")" ] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
for dir in /dev/shm/ringrun-mpi.*; do  # the watch's directory on tmpfs: gone with its ringrun
  [ -e "$dir" ] || continue
  pid=${dir#/dev/shm/ringrun-mpi.}
  kill -0 "${pid%%.*}" 2>/dev/null || fail "left in /dev/shm by a finished ringrun: $dir"
done
pgrep -f "$work/mpi_hello" >/dev/null && fail "a rank outlived ringrun"
echo "PASS"
