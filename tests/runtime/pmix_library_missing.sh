#!/usr/bin/env bash
# Ranks under mpirun meet through the host's PMIx, loaded when they do: a RINGRUN_PMIX_LIBRARY that
# does not load fails every rank in one line naming it and the fix, with no fallback and no hang.
set -uo pipefail
rank=${1:?usage: pmix_library_missing.sh PATH/TO/runtime_test_rank}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
out=$(timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
  -x RINGRUN_PMIX_LIBRARY=/nonexistent/libpmix.so.2 "$rank" 1 2>&1)
rc=$?
echo "$out"
((rc != 0 && rc != 124)) || { echo "FAILED: exit $rc, expected a refusal"; exit 1; }
lines=$(grep -c 'RINGRUN_PMIX_LIBRARY=/nonexistent/libpmix.so.2: .*point it at the host' <<<"$out")
((lines == 2)) || { echo "FAILED: expected the one-line error from each of the 2 ranks, saw $lines"; exit 1; }
echo "ok: both ranks refused in one line (exit $rc)"
