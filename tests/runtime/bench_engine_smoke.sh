#!/usr/bin/env bash
# ringrun-bench --collective engine with tiny sizes under mpirun: every row runs (fusion, the
# ResNet-50 mix, latency, shuffled submission) and --check finds no wrong element. Seconds, not a
# measurement. The latency rows start a fresh runtime per sample (ringrun_finalize, ringrun_init),
# each meeting through the process's one PMIx connection (ringrun(3), DESCRIPTION). Skips (77)
# without mpirun.
set -uo pipefail
bench=${1:?usage: bench_engine_smoke.sh PATH/TO/ringrun-bench}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
args=(--collective engine --check --json --peer none --engine-tensors 8 --engine-tensor-bytes 64
      --latency-sizes 4,4K --iters 1 --warmup 1 --sample-ms 0)
status=0
for order in "" --shuffle; do
  out=$(mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none "$bench" "${args[@]}" $order 2>&1)
  rc=$?
  echo "$out"
  if ((rc != 0)); then echo "FAIL: ringrun-bench exited with $rc ${order}"; status=1; continue; fi
  rows=$(grep -c '"wrong": 0' <<<"$out")
  # 8x64B, resnet50, and the two latency sizes
  if ((rows != 4)) || grep -q '"wrong": [1-9null]' <<<"$out"; then
    echo "FAIL: expected 4 rows with \"wrong\": 0 ${order}, got $rows"; status=1
  fi
done
exit $status
