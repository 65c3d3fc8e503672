// GPU calibration: microbenchmarks of one GPU through the runtime's own CUDA kernels — bf16 GEMM
// throughput over a grid of shapes (cuBLASLt), the rate under minutes of sustained load, device
// copy bandwidth, the elementwise kernels, fused attention by sequence length and head dim, the
// optimizer and the launch gap — written into the gpu section of a cluster file the simulator
// reads; every raw figure is kept under gpu.measured, from which the caller fits the GEMM curve
// (simulator/gemm_fit.h). Timing: CUDA events, one warm-up, the median of repetitions, random
// (never all-zero) data. The node and network sections are kept from a base cluster file: one GPU
// cannot measure collectives, and each kept section says so in its "source".
#pragma once

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "runtime/calibration.h"

namespace parallax {

// `base`: a cluster JSON (e.g. clusters/hgx-h200.json) whose datasheet peaks and bandwidths the
// measured efficiencies are relative to.
Result<nlohmann::json> calibrate_gpu_cluster(const nlohmann::json& base, const CalibrationOptions& options);

}  // namespace parallax
