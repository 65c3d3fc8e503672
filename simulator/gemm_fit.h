// GEMM curve fit: the two numbers of a GPU's GEMM efficiency (compute_cost.h: gemm_max_efficiency
// x wave quantization x prod over M, N, K of d / (d + gemm_half_dim)) that best reproduce measured
// GEMM rates, as `calibrate --device cuda` measures them. Each shape weighs by its measured time:
// a training step's time is spent in its long GEMMs, and a GEMM of a few microseconds measures the
// launch, not the tensor cores (the launch gap is measured on its own). The error fitted is each
// GEMM's predicted time relative to its measured one.
#pragma once

#include <cstdint>
#include <vector>

#include "simulator/cluster_spec.h"

namespace parallax {

struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  double tflops = 0;  // measured, in the precision fitted
};

struct GemmFit {
  double max_efficiency = 0, half_dim = 0;
  double rms_log_error = 0;  // time-weighted, of the fitted curve against the measured rates
};

// `gpu` supplies the peak of precision `p`, the SM count and the tile shape. Needs at least one
// rate, all positive. FP8 curves are fitted the same way, against the FP8 peak.
GemmFit fit_gemm_curve(const GpuSpec& gpu, const std::vector<GemmRate>& rates, Precision p = Precision::kBf16);

}  // namespace parallax
