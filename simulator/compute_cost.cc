#include "simulator/compute_cost.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace parallax {

double expected_tiles(double rows, double rows_sd, int64_t tile) {
  const double t = static_cast<double>(tile);
  if (rows_sd <= 0) return std::ceil(rows / t);
  // Spread over a tile or more, the fractional tile is uniform to 1e-8 (its departure decays as
  // exp(-2 pi^2 (sd / t)^2)): half a tile on average beyond the mean's rows.
  if (rows_sd >= t) return rows / t + 0.5;
  // E[ceil(r / t)] = sum over j >= 0 of P(r > j t), r ~ N(rows, rows_sd): 1 below 6 spreads
  // under the mean, 0 above 6 over it (erfc(6 / sqrt 2) = 2e-9), a dozen terms between.
  const double first = std::max(0.0, std::ceil((rows - 6 * rows_sd) / t));
  double tiles = first;
  for (double j = first; j * t < rows + 6 * rows_sd; ++j) tiles += 0.5 * std::erfc((j * t - rows) / (rows_sd * std::sqrt(2.0)));
  return tiles;
}

double wave_efficiency(const GpuSpec& gpu, const Gemm& g) {
  auto tile = [](int64_t dim, int64_t max_tile) { return std::min(max_tile, (dim + 15) / 16 * 16); };
  const int64_t tm = tile(g.m, gpu.gemm_tile_m), tn = tile(g.n, gpu.gemm_tile_n);
  const int64_t columns = (g.n + tn - 1) / tn * g.batch;
  double waves = 0;
  if (g.m_sd > 0) {
    waves = std::ceil(expected_tiles(static_cast<double>(g.m), g.m_sd, tm) * static_cast<double>(columns) / static_cast<double>(gpu.sm_count));
  } else {  // the common case in integers: every GEMM of every plan the search prices comes here
    waves = static_cast<double>(((g.m + tm - 1) / tm * columns + gpu.sm_count - 1) / gpu.sm_count);
  }
  const double executed = waves * static_cast<double>(gpu.sm_count * tm * tn);
  return static_cast<double>(g.m) * g.n * g.batch / executed;
}

namespace {
// Where x falls on the increasing grid `d`, in log2: the cell's lower index and the fraction
// across it (clamped to the grid: beyond it the nearest edge's rate holds).
std::pair<size_t, double> grid_cell(const std::vector<double>& d, double x) {
  if (x <= d.front()) return {0, 0.0};
  if (x >= d.back()) return {d.size() - 2, 1.0};
  size_t i = 0;
  while (d[i + 1] < x) ++i;
  return {i, (std::log2(x) - std::log2(d[i])) / (std::log2(d[i + 1]) - std::log2(d[i]))};
}

// The measured rate, trilinear in log2 of M, N and K. A batch of GEMMs (attention's heads, a
// grouped GEMM's experts) fills the GPU's SMs as one GEMM of M x batch rows.
double grid_efficiency(const GpuSpec& gpu, const Gemm& g) {
  const GemmGrid& grid = gpu.gemm_grid;
  const auto [i, fi] = grid_cell(grid.dims, double(g.m) * double(g.batch));
  const auto [j, fj] = grid_cell(grid.dims, double(g.n));
  const auto [k, fk] = grid_cell(grid.dims, double(g.k));
  double tflops = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c)
        tflops += (a ? fi : 1 - fi) * (b ? fj : 1 - fj) * (c ? fk : 1 - fk) * grid.at(i + a, j + b, k + c);
  return tflops / gpu.peak_bf16_tflops;
}

double curve_efficiency(const GpuSpec& gpu, const Gemm& g, double max_efficiency, double half_dim) {
  double eff = max_efficiency * wave_efficiency(gpu, g);
  for (int64_t dim : {g.m, g.n, g.k}) {
    const double d = static_cast<double>(dim);
    eff *= d / (d + half_dim);
  }
  return eff;
}
}  // namespace

double gemm_efficiency(const GpuSpec& gpu, const Gemm& g, Precision p) {
  if (p == Precision::kFp8 && gpu.fp8_gemm_max_efficiency > 0)
    return curve_efficiency(gpu, g, gpu.fp8_gemm_max_efficiency, gpu.fp8_gemm_half_dim);
  if (!gpu.gemm_grid.dims.empty()) return grid_efficiency(gpu, g);
  return curve_efficiency(gpu, g, gpu.gemm_max_efficiency, gpu.gemm_half_dim);
}

double gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g) {
  if (g.flops() <= 0) return 0;
  const double sustained = gpu.sustained_tensor_fraction * (p == Precision::kFp8 ? gpu.fp8_gemm_fraction : 1.0);
  return g.flops() / (gpu.peak_flops(p) * gemm_efficiency(gpu, g, p) * sustained);
}

double gemm_operand_bytes(Precision p, const Gemm& g) {
  const double in = p == Precision::kFp8 ? 1.0 : p == Precision::kFp32 ? 4.0 : 2.0;
  const double out = p == Precision::kFp32 ? 4.0 : 2.0;
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  return static_cast<double>(g.batch) * (in * (m * k + k * n) + out * m * n);
}

double grouped_gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g) {
  // A roofline: weight streaming and tensor-core math overlap inside the kernel (the measured H200
  // rows fit max() within 27% and a sum only within 58%: bench/results/2026-12-04-moe-grouped-gemm.md).
  // A GpuSpec built in code (not read from JSON) may leave the fraction unset: the copy rate then.
  const double eff = gpu.grouped_gemm_hbm_efficiency > 0 ? gpu.grouped_gemm_hbm_efficiency : gpu.memory_efficiency;
  const double streaming = gemm_operand_bytes(p, g) / (gpu.hbm_gbps * 1e9 * eff);
  return std::max(gemm_time_s(gpu, p, g), streaming);
}

double flash_attention_time_s(const GpuSpec& gpu, Precision p, double flops) {
  return flops / (gpu.peak_flops(p) * gpu.flash_attention_efficiency);
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

const AttentionCurve* attention_curve(const GpuSpec& gpu, const std::string& kernel, int64_t head_dim) {
  const AttentionCurve* best = nullptr;
  for (const AttentionCurve& c : gpu.attention) {
    if (c.kernel != kernel) continue;
    const double off = std::abs(std::log2(double(c.head_dim) / double(head_dim)));
    if (!best || off < std::abs(std::log2(double(best->head_dim) / double(head_dim)))) best = &c;
  }
  return best;
}

AttentionTimes attention_times(const GpuSpec& gpu, Precision p, const std::string& kernel, int64_t head_dim,
                               int64_t seq_len, double forward_flops) {
  const AttentionCurve* best = attention_curve(gpu, kernel, head_dim);
  if (!best) {
    const double fwd = flash_attention_time_s(gpu, p, forward_flops);
    return {fwd, 2.5 * fwd, false};
  }
  const double s = static_cast<double>(seq_len), tflops = 1e12;
  return {forward_flops / (interpolate_log2(best->seq_len, best->fwd_tflops, s) * tflops),
          2.5 * forward_flops / (interpolate_log2(best->seq_len, best->bwd_tflops, s) * tflops), true};
}

double memory_time_s(const GpuSpec& gpu, double bytes) {
  return bytes / (gpu.hbm_gbps * 1e9 * gpu.memory_efficiency);
}

}  // namespace parallax
