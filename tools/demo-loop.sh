#!/usr/bin/env bash
# The closed loop on this machine with a small GPT: calibrate the CPU ranks, simulate a plan on
# the calibrated cluster, train the same plan under MPI, compare the two steps op by op, then fit
# the cost model's calibration to the measured run and predict again.
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
echo "== recalibrate from the measured run: calibrate --runs -> $OUT/demo-calibration.json"
MEASURED=$("$BUILD/bin/compare" --predicted "$OUT/predicted.json" --measured "$OUT/measured.json" --format json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["measured"]["step_time_s"])')
printf 'id,source,model,cluster,plan,measured_step_s\ndemo,this machine,%s,%s,%s,%s\n' \
  "$MODEL" "$OUT/cpu-localhost.json" "$PLAN" "$MEASURED" > "$OUT/demo-runs.csv"
"$BUILD/bin/calibrate" --runs "$OUT/demo-runs.csv" --name demo --out "$OUT/demo-calibration.json" --quiet 2>/dev/null
FIRST=$("$BUILD/bin/simulate" --model "$MODEL" --cluster "$OUT/cpu-localhost.json" --plan "$PLAN" --format json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["step_time_s"])')
SECOND=$("$BUILD/bin/simulate" --model "$MODEL" --cluster "$OUT/cpu-localhost.json" --plan "$PLAN" \
  --calibration "$OUT/demo-calibration.json" --format json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["step_time_s"])')
echo "== train again: the recalibrated prediction against a run the fit has not seen"
"${MPIRUN[@]}" "$BUILD/bin/train" --model "$MODEL" --plan "$PLAN" --steps 4 --trace "$OUT/measured-2.json" >/dev/null
AGAIN=$("$BUILD/bin/compare" --predicted "$OUT/predicted.json" --measured "$OUT/measured-2.json" --format json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["measured"]["step_time_s"])')
/usr/bin/python3 -c "m, a, b, m2 = $MEASURED, $FIRST, $SECOND, $AGAIN
print(f'first run: measured step (median of 3) {m:.4f} s, predicted {a:.4f} s ({100*(a/m-1):+.1f}%)')
print(f'recalibrated on it: {b:.4f} s; second run measured {m2:.4f} s ({100*(b/m2-1):+.1f}%)')"
