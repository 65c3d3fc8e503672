// GPU calibration: microbenchmarks of one GPU through the runtime's own CUDA kernels — bf16 GEMM
// throughput over a sweep of shapes (cuBLASLt), device copy bandwidth, the elementwise kernels,
// fused attention and the optimizer — fitted into the gpu section of a cluster file the simulator
// reads. Timing: CUDA events, one warm-up, the median of repetitions, random (never all-zero)
// data. The node and network sections are kept from a base cluster file: one GPU cannot measure
// collectives, and each kept section says so in its "source".
#pragma once

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "runtime/calibration.h"

namespace parallax {

// `base`: a cluster JSON (e.g. clusters/hgx-h200.json) whose datasheet peaks and bandwidths the
// measured efficiencies are relative to.
Result<nlohmann::json> calibrate_gpu_cluster(const nlohmann::json& base, const CalibrationOptions& options);

}  // namespace parallax
