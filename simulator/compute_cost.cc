#include "simulator/compute_cost.h"

#include <algorithm>
#include <cmath>

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
  const double sustained = gpu.sustained_tensor_fraction * (p == Precision::kFp8 ? gpu.fp8_gemm_fraction : 1.0);
  return g.flops() / (gpu.peak_flops(p) * gemm_efficiency(gpu, g) * sustained);
}

double flash_attention_time_s(const GpuSpec& gpu, Precision p, double flops) {
  return flops / (gpu.peak_flops(p) * gpu.flash_attention_efficiency * gpu.sustained_tensor_fraction);
}

namespace {
double interpolate_log2(const std::vector<double>& x, const std::vector<double>& y, double at) {
  if (at <= x.front()) return y.front();
  if (at >= x.back()) return y.back();
  size_t k = 1;
  while (x[k] < at) ++k;
  const double f = (std::log2(at) - std::log2(x[k - 1])) / (std::log2(x[k]) - std::log2(x[k - 1]));
  return y[k - 1] + f * (y[k] - y[k - 1]);
}
}  // namespace

AttentionTimes attention_times(const GpuSpec& gpu, Precision p, const std::string& kernel, int64_t head_dim,
                               int64_t seq_len, double forward_flops) {
  const AttentionCurve* best = nullptr;
  for (const AttentionCurve& c : gpu.attention) {
    if (c.kernel != kernel) continue;
    const double off = std::abs(std::log2(double(c.head_dim) / double(head_dim)));
    if (!best || off < std::abs(std::log2(double(best->head_dim) / double(head_dim)))) best = &c;
  }
  if (!best) {
    const double fwd = flash_attention_time_s(gpu, p, forward_flops);
    return {fwd, 2.5 * fwd, false};
  }
  const double s = static_cast<double>(seq_len), tflops = 1e12 * gpu.sustained_tensor_fraction;
  return {forward_flops / (interpolate_log2(best->seq_len, best->fwd_tflops, s) * tflops),
          2.5 * forward_flops / (interpolate_log2(best->seq_len, best->bwd_tflops, s) * tflops), true};
}

double memory_time_s(const GpuSpec& gpu, double bytes) {
  return bytes / (gpu.hbm_gbps * 1e9 * gpu.memory_efficiency);
}

}  // namespace parallax
