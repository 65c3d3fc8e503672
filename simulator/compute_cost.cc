#include "simulator/compute_cost.h"

namespace parallax {

double gemm_efficiency(const GpuSpec& gpu, const Gemm& g) {
  double eff = gpu.gemm_max_efficiency;
  for (int64_t dim : {g.m, g.n, g.k}) {
    const double d = static_cast<double>(dim);
    eff *= d / (d + gpu.gemm_half_dim);
  }
  return eff;
}

double gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g) {
  if (g.flops() <= 0) return 0;
  return g.flops() / (gpu.peak_flops(p) * gemm_efficiency(gpu, g));
}

double flash_attention_time_s(const GpuSpec& gpu, Precision p, double flops) {
  return flops / (gpu.peak_flops(p) * gpu.flash_attention_efficiency);
}

double memory_time_s(const GpuSpec& gpu, double bytes) {
  return bytes / (gpu.hbm_gbps * 1e9 * gpu.memory_efficiency);
}

}  // namespace parallax
