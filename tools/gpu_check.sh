#!/usr/bin/env bash
# The GPU check (docs/architecture.md, "GPU check"), in one call, within 8 minutes on one H200 ($GPU_CHECK_SECONDS,
# default 400, bounds the whole run; each step gets at most what is left):
#   1. kernel and runtime tests against the CPU references;
#   2. a 1.3B GPT trained on one GPU (bf16, sequence 2048): tokens/s and MFU;
#   3. calibrate the GPU into a cluster file (with $CALIBRATE_SUSTAINED_SECONDS s of sustained GEMM
#      load), simulate the same plan and a second one with it, compare; then the kernels the
#      frameworks run, through PyTorch (tools/gpu_physics.py: GEMM grids in bf16 and FP8, grouped
#      GEMMs, attention by sequence length, memory-bound kernels, launch gap, sustained rate;
#      $PHYSICS_SECONDS s, of which $SUSTAINED_SECONDS sustained); Parallax's own kernels (Google
#      Benchmark);
#   4. rank emulation: stage 0 and stage 3 of Llama-2-13B under TP 8 x PP 4 x DP 2 (ZeRO-1) with
#      stand-in collectives, against the simulator's compute-only prediction for those stages.
# The steps run in that order, so a run cut short keeps what matters most.
# Uses the binaries `make gpu-build` leaves in build-gpu/ (carry build-gpu/bin, build-gpu/tests and
# build-gpu/lib); cuBLAS and NCCL come from PyTorch's Python packages when the system has none.
# Every step writes into a scratch folder; $OUT (default: a new temporary folder) receives at most
# 8 files, as the device machine returns no more: summary.md (printed last), log.txt, the key
# results, and results.tar.gz with everything.
# Without a GPU every GPU step fails or skips cleanly: that is the dry run of this script.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
W=$(mktemp -d)
B=build-gpu
LOG="$W/log.txt"
: >"$LOG"
DEADLINE=${GPU_CHECK_SECONDS:-400}
PHYSICS_SECONDS=${PHYSICS_SECONDS:-130}
SUSTAINED_SECONDS=${SUSTAINED_SECONDS:-30}
CALIBRATE_SUSTAINED_SECONDS=${CALIBRATE_SUSTAINED_SECONDS:-60}

pack() {
  tar -C "$W" -czf "$OUT/results.tar.gz" .
  for f in summary.md log.txt device.txt bench.json h200-calibrated.json physics.json measured-1.3b.json; do
    [[ -f "$W/$f" ]] && cp "$W/$f" "$OUT/"
  done
}
trap pack EXIT

. tools/gpu_libs.sh
libs=$(gpu_libs "$B")
export PARALLAX_DATA_DIR="$PWD" NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# run NAME SECONDS CMD...: one step, bounded in time, its output in $W/NAME.txt and the log.
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
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 10 "$limit" "$@" >"$W/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s: $*" | tee -a "$LOG"
  tail -n 5 "$W/$name.txt" >>"$LOG"
  return $rc
}

for f in bin/train bin/simulate bin/compare bin/calibrate tests/cuda_kernels_test tests/cuda_runtime_test bin/gpu_kernels_bench; do
  [[ -x "$B/$f" ]] || { echo "gpu_check: $B/$f is missing: run 'make gpu-build' first" >&2; exit 2; }
done
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  grep PRETTY_NAME /etc/os-release
  ldd --version | head -n 1
} >"$W/device.txt"
[[ "$libs" == *"/lib/cxx"* ]] && echo "== using the carried libstdc++ ($B/lib/cxx)" | tee -a "$LOG"
LD_LIBRARY_PATH="$libs" ldd "$B/bin/train" "$B/bin/gpu_kernels_bench" 2>&1 |
  grep -E 'cublas|nccl|stdc|not found' | tee -a "$W/device.txt" | grep -q "not found" &&
  echo "gpu_check: unresolved libraries (see device.txt)" | tee -a "$LOG" >&2

# 1. Correctness first (the steps run in order of what matters most, should the time run out).
run kernels_test 60 "$B/tests/cuda_kernels_test" --gtest_output=json:"$W/kernels_test.json"
run runtime_test 60 "$B/tests/cuda_runtime_test" --gtest_output=json:"$W/runtime_test.json"

# 2. GPT 1.3B on one GPU: 4 micro-batches of 8 x 2048 tokens per step, no recompute. Should NCCL
#    not start on this machine, the same work runs again as rank 0 of the one-GPU plan with
#    stand-in collectives (there are none to make on one GPU): step time and memory, no MFU field.
cat >"$W/plan-1.3b.json" <<'EOF'
{"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": 8, "global_batch": 32, "seq_len": 2048,
 "schedule": "1f1b", "recompute": "none", "sequence_parallel": false, "precision": "bf16",
 "execution": {"attention": "flash", "fp32_gradients": true}}
EOF
train_13=(--plan "$W/plan-1.3b.json" --model gpt-1.3b --steps 6 --init fast --peak-tflops 989.4 --format json
  --trace "$W/measured-1.3b.json")
run train_1.3b 150 "$B/bin/train" --device cuda "${train_13[@]}"
rc=$?
if ((rc != 0 && rc != 124 && rc != 137)); then  # not for a step that ran out of time: it would again
  cp "$W/train_1.3b.txt" "$W/train_1.3b_nccl.txt"
  run train_1.3b 120 "$B/bin/train" --device cuda --emulate-rank 0 "${train_13[@]}"
fi

# 3. Calibrate, simulate the same plan on the calibrated GPU, compare.
run calibrate $((90 + CALIBRATE_SUSTAINED_SECONDS)) "$B/bin/calibrate" --device cuda --base hgx-h200 --name hgx-h200-measured \
  --sustained-seconds "$CALIBRATE_SUSTAINED_SECONDS" --out "$W/h200-calibrated.json"
cluster="$W/h200-calibrated.json"
if [[ ! -s "$cluster" ]]; then
  cluster=hgx-h200
  echo "== calibration failed: predictions use the datasheet cluster hgx-h200" | tee -a "$LOG"
fi
run simulate_1.3b 30 "$B/bin/simulate" --model gpt-1.3b --cluster "$cluster" --plan "$W/plan-1.3b.json" \
  --format json --trace "$W/predicted-1.3b.json"
run compare_1.3b 30 "$B/bin/compare" --predicted "$W/predicted-1.3b.json" --measured "$W/measured-1.3b.json" --format json

# 3a. A second plan of the same model, priced on the same calibration: micro-batch 4, full recompute.
sed -e 's/"micro_batch": 8/"micro_batch": 4/' -e 's/"recompute": "none"/"recompute": "full"/' "$W/plan-1.3b.json" >"$W/plan-1.3b-rc.json"
run train_1.3b_rc 90 "$B/bin/train" --device cuda --plan "$W/plan-1.3b-rc.json" --model gpt-1.3b --steps 4 --init fast \
  --peak-tflops 989.4 --format json --trace "$W/measured-1.3b-rc.json"
run simulate_1.3b_rc 30 "$B/bin/simulate" --model gpt-1.3b --cluster "$cluster" --plan "$W/plan-1.3b-rc.json" \
  --format json --trace "$W/predicted-1.3b-rc.json"

# 3b. The kernels the frameworks run (PyTorch: cuBLAS, FP8 _scaled_mm, grouped GEMMs, FlashAttention-2,
#     cuDNN attention, fused AdamW), the launch gap and the sustained GEMM rate.
if ((PHYSICS_SECONDS > 0)); then
  run physics $((PHYSICS_SECONDS + 20)) python3 tools/gpu_physics.py "$W/physics.json" --seconds "$PHYSICS_SECONDS" \
    --sustained-seconds "$SUSTAINED_SECONDS"
fi
# The frameworks' attention curves, as measured, into the calibrated cluster (hgx-h200-measured).
if [[ -s "$W/physics.json" && -s "$W/h200-calibrated.json" ]]; then
  python3 tools/gpu_summary.py merge-physics "$W/h200-calibrated.json" "$W/physics.json" "$W/h200-calibrated.json" >>"$LOG" 2>&1
fi
run bench 60 "$B/bin/gpu_kernels_bench" --benchmark_min_time=0.3 --benchmark_format=json --benchmark_out="$W/bench.json"

# 4. Rank emulation of Llama-2-13B, TP 8 x PP 4 x DP 2 (64 GPUs), ZeRO-1, 16 micro-batches of
#    1 x 4096 per DP rank, 1F1B: ranks 0 (stage 0: embedding) and 48 (stage 3: output layer and
#    loss). The prediction is the simulator's with collectives made free, so both sides are the
#    compute of the stage.
cat >"$W/plan-13b.json" <<'EOF'
{"tp": 8, "pp": 4, "dp": 2, "zero": 1, "micro_batch": 1, "global_batch": 32, "seq_len": 4096,
 "schedule": "1f1b", "recompute": "none", "sequence_parallel": false, "precision": "bf16",
 "execution": {"attention": "flash", "fp32_gradients": true}}
EOF
python3 tools/gpu_summary.py free-comm-cluster "$cluster" "$W/free-comm.json" >>"$LOG" 2>&1
for rank in 0 48; do
  run "emulate_13b_r$rank" 75 "$B/bin/train" --device cuda --emulate-rank "$rank" --plan "$W/plan-13b.json" --model 13b \
    --steps 3 --init fast --format json --trace "$W/emulated-13b-r$rank.json"
done
run simulate_13b 30 "$B/bin/simulate" --model 13b --cluster "$W/free-comm.json" --plan "$W/plan-13b.json" \
  --format json --trace "$W/predicted-13b.json"

python3 tools/gpu_summary.py report "$W" | tee "$W/summary.md"
