#!/usr/bin/env bash
# Where a GPU training step's time goes, kernel by kernel, with Nsight Compute (for a device where
# `ncu` can read the GPU; see docs/architecture.md, "GPU check"). Uses the binaries of `make gpu-build`.
#   1. kernels.csv: every kernel of one step of the bundled 1.3B GPT (one micro-batch of 8 x 2,048,
#      bf16), its launches and total duration (gpu__time_duration, clocks left alone);
#   2. attention.txt: the fused attention's three kernels at that shape, with the throughput,
#      memory, warp-state and occupancy sections (what limits them).
# Writes into $OUT (default: a new temporary folder) and prints the per-kernel table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
B=build-gpu
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[[ -n "$NCU" ]] || { echo "gpu_profile: no ncu on this machine" >&2; exit 2; }
. tools/gpu_libs.sh
libs=$(gpu_libs "$B")
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PARALLAX_DATA_DIR="$PWD"
uname -r >"$OUT/device.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$OUT/device.txt" 2>&1

cat >"$OUT/plan.json" <<'EOF'
{"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": 8, "global_batch": 8, "seq_len": 2048,
 "schedule": "1f1b", "recompute": "none", "sequence_parallel": false, "precision": "bf16",
 "execution": {"attention": "flash", "fp32_gradients": true}}
EOF
# One step (its kernels' durations do not depend on warm-up; the initial fills show as their own kernels).
timeout -k 10 "${PROFILE_SECONDS:-150}" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
  --print-summary per-kernel \
  "$B/bin/train" --device cuda --plan "$OUT/plan.json" --model gpt-1.3b --steps 1 --init fast --format json \
  >"$OUT/kernels.csv" 2>"$OUT/kernels.err"
echo "== kernels: exit $?"
timeout -k 10 120 "$NCU" --clock-control none -k 'regex:(fwd|dkv|dq)_tc_kernel' -c 3 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  "$B/bin/gpu_kernels_bench" --benchmark_filter='BM_FlashAttentionBf16/8/1' --benchmark_min_time=0.01 \
  >"$OUT/attention.txt" 2>&1
echo "== attention: exit $?"
python3 - "$OUT/kernels.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    sys.exit("no per-kernel summary (see kernels.err)")
head = rows[0]
print(" | ".join(head))
for r in rows[1:60]:
    print(" | ".join(r))
EOF
