#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from the seed corpus in tests/fuzz/corpus; a crash
# leaves its input in BUILD/fuzz-artifacts and fails the script (turn it into a regression test).
# With FUZZ_RUNS=N each target instead runs exactly N inputs from seed 1 (CI; which inputs libFuzzer
# tries still varies a little between machines, so CI may reach one a local run did not).
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_PER_TARGET=${2:-60}
mkdir -p "$BUILD/fuzz-artifacts"
for target in model cluster plan trace calibration runs; do
  corpus="$BUILD/fuzz-corpus/$target"
  if [[ -n "${FUZZ_RUNS:-}" ]]; then rm -rf "$corpus"; fi  # start from the seeds alone
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/$target/* "$corpus/" 2>/dev/null || true
  binary="$BUILD/bin/${target}_fuzz"
  [[ -x "$binary" ]] || { echo "fuzz: $binary is missing (make fuzz builds it)" >&2; exit 1; }
  if [[ -n "${FUZZ_RUNS:-}" ]]; then echo "== ${target}_fuzz, $FUZZ_RUNS runs"; else echo "== ${target}_fuzz, ${SECONDS_PER_TARGET} s"; fi
  limit=(-max_total_time="$SECONDS_PER_TARGET")
  if [[ -n "${FUZZ_RUNS:-}" ]]; then limit=(-runs="$FUZZ_RUNS" -seed=1); fi
  ASAN_OPTIONS=detect_leaks=1 "$binary" "$corpus" "${limit[@]}" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/${target}-" 2>&1 |
    grep -E "stat::number_of_executed_units|ERROR|SUMMARY|crash|Test unit written" || true
  if ls "$BUILD/fuzz-artifacts/${target}-"* >/dev/null 2>&1; then
    echo "fuzz: ${target}_fuzz found a failing input in $BUILD/fuzz-artifacts" >&2
    exit 1
  fi
done
