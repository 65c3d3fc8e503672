#include "simulator/gemm_fit.h"

#include <algorithm>
#include <cmath>

#include "simulator/compute_cost.h"

namespace parallax {

GemmFit fit_gemm_curve(const GpuSpec& gpu, const std::vector<GemmRate>& rates, Precision p) {
  GpuSpec shape_only = gpu;
  shape_only.gemm_max_efficiency = 1;
  shape_only.gemm_grid = {};  // the curve is fitted, not a grid the GPU may already carry
  std::vector<double> weight, a(rates.size());
  double total = 0;
  for (const GemmRate& r : rates) {
    weight.push_back(2.0 * double(r.m) * double(r.n) * double(r.k) / (r.tflops * 1e12));
    total += weight.back();
  }
  GemmFit best;
  best.rms_log_error = INFINITY;
  double best_sq = INFINITY;
  // The error of a predicted GEMM time relative to the measured one, weighted by that time: a
  // launch-bound shape (predicted far faster than measured) errs by at most -1 on a tiny weight,
  // where a log error would be unbounded. With a_i = measured rate / (peak x shape efficiency) the
  // relative error is a_i / max - 1, whose weighted least squares over x = 1 / max is
  // x = sum w a / sum w a^2; only half_dim is searched (5% steps, as fit_gemm_half_dim does).
  for (double h = 0; h <= 4096; h = h < 1 ? 1 : h * 1.05) {
    shape_only.gemm_half_dim = h;
    double wa = 0, waa = 0;
    for (size_t i = 0; i < rates.size(); ++i) {
      const Gemm g{"measured", rates[i].m, rates[i].n, rates[i].k};
      a[i] = rates[i].tflops * 1e12 / (gpu.peak_flops(p) * gemm_efficiency(shape_only, g));
      wa += weight[i] * a[i], waa += weight[i] * a[i] * a[i];
    }
    const double x = wa / waa;
    double sq = 0, log_sq = 0;
    for (size_t i = 0; i < rates.size(); ++i) {
      sq += weight[i] * (a[i] * x - 1) * (a[i] * x - 1) / total;
      log_sq += weight[i] * std::log(a[i] * x) * std::log(a[i] * x) / total;
    }
    if (sq < best_sq) best_sq = sq, best = {std::min(1.0, 1.0 / x), h, std::sqrt(log_sq)};
  }
  return best;
}

}  // namespace parallax
