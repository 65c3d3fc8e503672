#!/usr/bin/env bash
# The closed loop on this machine with a small GPT: calibrate the CPU ranks, simulate a plan on
# the calibrated cluster, train the same plan under MPI, and compare the two steps op by op.
set -euo pipefail
BUILD=${1:-build}
OUT=${BUILD}/demo
mkdir -p "$OUT"
MPIRUN=(mpirun --oversubscribe -np 2)
if [[ $(id -u) -eq 0 ]]; then MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2); fi
MODEL=tests/data/small-gpt.json
PLAN=tests/data/demo-plan.json
echo "== calibrate (2 CPU ranks) -> $OUT/cpu-localhost.json"
"${MPIRUN[@]}" "$BUILD/bin/calibrate" --quick --out "$OUT/cpu-localhost.json"
echo "== plan: small GPT on 2 calibrated CPU ranks"
"$BUILD/bin/planner" --model "$MODEL" --gpus 2 --cluster "$OUT/cpu-localhost.json" --precision fp32 --runtime cpu \
  --global-batch 8 --seq-len 128 --top 5
echo "== simulate $PLAN"
"$BUILD/bin/simulate" --model "$MODEL" --cluster "$OUT/cpu-localhost.json" --plan "$PLAN" --trace "$OUT/predicted.json" \
  | sed -n '1,8p'
echo "== train $PLAN"
"${MPIRUN[@]}" "$BUILD/bin/train" --model "$MODEL" --plan "$PLAN" --steps 4 --trace "$OUT/measured.json"
echo "== compare"
"$BUILD/bin/compare" --predicted "$OUT/predicted.json" --measured "$OUT/measured.json"
"$BUILD/bin/compare" --predicted "$OUT/predicted.json" --measured "$OUT/measured.json" --format html \
  --out "$OUT/compare.html"
echo "(timelines: $OUT/compare.html)"
