#include "simulator/compute_cost.h"

#include <algorithm>

namespace parallax {

double wave_efficiency(const GpuSpec& gpu, const Gemm& g) {
  auto tile = [](int64_t dim, int64_t max_tile) { return std::min(max_tile, (dim + 15) / 16 * 16); };
  const int64_t tm = tile(g.m, gpu.gemm_tile_m), tn = tile(g.n, gpu.gemm_tile_n);
  const int64_t tiles = ((g.m + tm - 1) / tm) * ((g.n + tn - 1) / tn) * g.batch;
  const int64_t waves = (tiles + gpu.sm_count - 1) / gpu.sm_count;
  const double executed = static_cast<double>(waves) * gpu.sm_count * tm * tn;
  return static_cast<double>(g.m) * g.n * g.batch / executed;
}

double gemm_efficiency(const GpuSpec& gpu, const Gemm& g) {
  double eff = gpu.gemm_max_efficiency * wave_efficiency(gpu, g);
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
