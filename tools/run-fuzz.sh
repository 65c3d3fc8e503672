#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from the seed corpus in tests/fuzz/corpus; a crash
# leaves its input in BUILD/fuzz-artifacts and fails the script (turn it into a regression test).
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_PER_TARGET=${2:-60}
mkdir -p "$BUILD/fuzz-artifacts"
for target in model cluster plan trace; do
  corpus="$BUILD/fuzz-corpus/$target"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/$target/* "$corpus/" 2>/dev/null || true
  binary="$BUILD/bin/${target}_fuzz"
  [[ -x "$binary" ]] || { echo "fuzz: $binary is missing (make fuzz builds it)" >&2; exit 1; }
  echo "== ${target}_fuzz for ${SECONDS_PER_TARGET} s"
  ASAN_OPTIONS=detect_leaks=1 "$binary" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/${target}-" 2>&1 |
    grep -E "stat::number_of_executed_units|ERROR|SUMMARY|crash|Test unit written" || true
  if ls "$BUILD/fuzz-artifacts/${target}-"* >/dev/null 2>&1; then
    echo "fuzz: ${target}_fuzz found a failing input in $BUILD/fuzz-artifacts" >&2
    exit 1
  fi
done
