#!/usr/bin/env bash
# The GPU check of ../shared/GPU.md, in one call, within 8 minutes on one H200 ($GPU_CHECK_SECONDS,
# default 450, bounds the whole run; each step gets at most what is left):
#   1. kernel and runtime tests against the CPU references; the bf16 GEMM and copy ceilings and
#      the runtime's kernels (Google Benchmark);
#   2. a 1.3B GPT trained on one GPU (bf16, sequence 2048): tokens/s and MFU;
#   3. calibrate the GPU into a cluster file, simulate the same plan with it, compare;
#   4. rank emulation: stage 0 and stage 3 of Llama-2-13B under TP 8 x PP 4 x DP 2 (ZeRO-1) with
#      stand-in collectives, against the simulator's compute-only prediction for those stages.
# Uses the binaries `make gpu-build` leaves in build-gpu/ (carry build-gpu/bin, build-gpu/tests and
# build-gpu/lib); cuBLAS and NCCL come from PyTorch's Python packages when the system has none.
# Results go to $OUT (default: a new temporary folder); the summary table is printed last.
# Without a GPU every GPU step fails or skips cleanly: that is the dry run of this script.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
B=build-gpu
LOG="$OUT/log.txt"
: >"$LOG"
DEADLINE=${GPU_CHECK_SECONDS:-450}

libs="$PWD/$B/lib"
nvidia=$(python3 -c "import nvidia, os; print(nvidia.__path__[0])" 2>/dev/null || true)
if [[ -n "$nvidia" ]]; then
  for d in $(find "$nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u); do libs="$libs:$d"; done
fi
export PARALLAX_DATA_DIR="$PWD"

# run NAME SECONDS CMD...: one step, bounded in time, its output in $OUT/NAME.txt and the log.
run() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  if ((left < 5)); then
    echo "== $name: skipped, the check's $DEADLINE s are spent" | tee -a "$LOG"
    return 124
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s: $*" | tee -a "$LOG"
  tail -n 5 "$OUT/$name.txt" >>"$LOG"
  return $rc
}

for f in bin/train bin/simulate bin/compare bin/calibrate tests/cuda_kernels_test tests/cuda_runtime_test bin/gpu_kernels_bench; do
  [[ -x "$B/$f" ]] || { echo "gpu_check: $B/$f is missing: run 'make gpu-build' first" >&2; exit 2; }
done
nvidia-smi -L >"$OUT/device.txt" 2>&1 || echo "no nvidia-smi" >"$OUT/device.txt"
# The build machine's libstdc++ only where this machine's own is too old for the binaries.
if ! LD_LIBRARY_PATH="$libs" "$B/bin/gpu_kernels_bench" --help >/dev/null 2>>"$LOG"; then
  libs="$libs:$PWD/$B/lib/cxx"
  echo "== using the carried libstdc++ ($B/lib/cxx)" | tee -a "$LOG"
fi
LD_LIBRARY_PATH="$libs" ldd "$B/bin/train" "$B/bin/gpu_kernels_bench" | grep "not found" >>"$LOG" &&
  echo "gpu_check: unresolved libraries (see $LOG)" >&2

# 1. Correctness, then the ceilings and kernel speeds.
run kernels_test 120 "$B/tests/cuda_kernels_test" --gtest_output=json:"$OUT/kernels_test.json"
run runtime_test 120 "$B/tests/cuda_runtime_test" --gtest_output=json:"$OUT/runtime_test.json"
run bench 90 "$B/bin/gpu_kernels_bench" --benchmark_min_time=0.3 --benchmark_format=json --benchmark_out="$OUT/bench.json"

# 2. GPT 1.3B on one GPU: 4 micro-batches of 8 x 2048 tokens per step, no recompute.
cat >"$OUT/plan-1.3b.json" <<'EOF'
{"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": 8, "global_batch": 32, "seq_len": 2048,
 "schedule": "1f1b", "recompute": "none", "sequence_parallel": false, "precision": "bf16",
 "execution": {"attention": "flash", "fp32_gradients": true}}
EOF
run train_1.3b 180 "$B/bin/train" --device cuda --plan "$OUT/plan-1.3b.json" --model gpt-1.3b --steps 6 --init fast \
  --peak-tflops 989.4 --format json --trace "$OUT/measured-1.3b.json"

# 3. Calibrate, simulate the same plan on the calibrated GPU, compare.
run calibrate 120 "$B/bin/calibrate" --device cuda --base hgx-h200 --name h200-calibrated --out "$OUT/h200-calibrated.json"
cluster="$OUT/h200-calibrated.json"
[[ -s "$cluster" ]] || cluster=hgx-h200
run simulate_1.3b 60 "$B/bin/simulate" --model gpt-1.3b --cluster "$cluster" --plan "$OUT/plan-1.3b.json" \
  --format json --trace "$OUT/predicted-1.3b.json"
run compare_1.3b 60 "$B/bin/compare" --predicted "$OUT/predicted-1.3b.json" --measured "$OUT/measured-1.3b.json" --format json

# 4. Rank emulation of Llama-2-13B, TP 8 x PP 4 x DP 2 (64 GPUs), ZeRO-1, 16 micro-batches of
#    1 x 4096 per DP rank, 1F1B: ranks 0 (stage 0: embedding) and 48 (stage 3: output layer and
#    loss). The prediction is the simulator's with collectives made free, so both sides are the
#    compute of the stage.
cat >"$OUT/plan-13b.json" <<'EOF'
{"tp": 8, "pp": 4, "dp": 2, "zero": 1, "micro_batch": 1, "global_batch": 32, "seq_len": 4096,
 "schedule": "1f1b", "recompute": "none", "sequence_parallel": false, "precision": "bf16",
 "execution": {"attention": "flash", "fp32_gradients": true}}
EOF
python3 tools/gpu_summary.py free-comm-cluster "$cluster" "$OUT/free-comm.json" >>"$LOG" 2>&1
for rank in 0 48; do
  run "emulate_13b_r$rank" 120 "$B/bin/train" --device cuda --emulate-rank "$rank" --plan "$OUT/plan-13b.json" --model 13b \
    --steps 3 --init fast --format json --trace "$OUT/emulated-13b-r$rank.json"
done
run simulate_13b 60 "$B/bin/simulate" --model 13b --cluster "$OUT/free-comm.json" --plan "$OUT/plan-13b.json" \
  --format json --trace "$OUT/predicted-13b.json"

python3 tools/gpu_summary.py report "$OUT" | tee "$OUT/summary.md"
