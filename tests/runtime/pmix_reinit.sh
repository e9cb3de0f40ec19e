#!/usr/bin/env bash
# ringrun_init after ringrun_finalize under mpirun, where ranks meet through PMIx (ringrun(3),
# DESCRIPTION): 2 ranks each init, run the collectives and finalize ROUNDS times (default 20)
# while two busy loops load the machine, so that the ranks finalize and init again at different
# moments. Skips (77) without mpirun.
#   pmix_reinit.sh PATH/TO/runtime_test_rank [ROUNDS]
set -uo pipefail
rank=${1:?usage: pmix_reinit.sh PATH/TO/runtime_test_rank [ROUNDS]}
rounds=${2:-20}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
load=()
stop_load() {
  ((${#load[@]} == 0)) || kill "${load[@]}" 2>/dev/null
  wait "${load[@]}" 2>/dev/null
}
trap stop_load EXIT
for _ in 1 2; do
  (while :; do :; done) &
  load+=($!)
done
start=$SECONDS
timeout -k 5 100 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none "$rank" reinit "$rounds"
rc=$?
echo "pmix_reinit: $rounds rounds on 2 ranks beside 2 busy loops: exit $rc after $((SECONDS - start)) s"
exit $rc
