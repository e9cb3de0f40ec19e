#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for SECONDS each: run_fuzzers.sh BUILD_DIR [SECONDS].
# Starts from the seeds in tests/fuzz/corpus/<target> (never modified: new inputs go to
# BUILD_DIR/fuzz/corpus/<target>); a crash leaves its input in BUILD_DIR/fuzz/artifacts/<target>/ —
# copy it to tests/fuzz/regressions/<target>/ and fix the bug: every build replays that folder.
set -uo pipefail
build=$1
seconds=${2:-30}
src=$(cd "$(dirname "$0")" && pwd)
out=$build/fuzz
mkdir -p "$out"
: >"$out/summary.txt"
failures=0
targets=$(ls "$src"/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp$||')
for target in $targets; do
  corpus=$out/corpus/$target artifacts=$out/artifacts/$target
  mkdir -p "$corpus" "$artifacts"
  inputs=("$corpus" "$src/corpus/$target")
  [ -d "$src/regressions/$target" ] && inputs+=("$src/regressions/$target")
  # rss_limit: a parser that allocates without bound fails here; max_len keeps inputs readable.
  "$out/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=1024 -max_len=4096 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${inputs[@]}" >"$out/$target.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$out/$target.log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "fuzz_$target: ok, ${runs:-?} runs in ${seconds} s" | tee -a "$out/summary.txt"
  else
    failures=$((failures + 1))
    echo "fuzz_$target: FAILED (exit $rc), input in $artifacts/; log $out/$target.log" | tee -a "$out/summary.txt"
    grep -E 'ERROR|SUMMARY|runtime error' "$out/$target.log" | head -n 5
  fi
done
count=$(echo "$targets" | wc -w)
echo "$((count - failures)) of $count fuzz targets ran ${seconds} s without a crash" | tee -a "$out/summary.txt"
[ $failures -eq 0 ]
