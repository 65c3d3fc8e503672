#include "runtime/calibration.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

// Synthetic all-reduce times over n = 4 ranks with alpha 5 us and busbw 10 GB/s:
// t = 2(n-1) alpha + 2(n-1)/n S / busbw = 30 us + 1.5 S / 1e10.
TEST(Calibration, AlphaBetaFitRecoversTheLine) {
  std::vector<double> bytes, seconds;
  for (double s = 1e3; s <= 1e8; s *= 10) {
    bytes.push_back(s);
    seconds.push_back(30e-6 + 1.5 * s / 1e10);
  }
  const AlphaBeta ab = fit_allreduce(bytes, seconds, 4);
  EXPECT_NEAR(ab.latency_s, 5e-6, 1e-9);
  EXPECT_NEAR(ab.busbw_Bps, 1e10, 1e3);
}

// Efficiencies generated with d_half = 64 are fitted back to within the search grid's 5% step.
TEST(Calibration, GemmHalfDimFit) {
  std::vector<std::array<int, 3>> shapes;
  std::vector<double> eff;
  for (int m : {32, 128, 512})
    for (int n : {64, 256})
      for (int k : {32, 1024}) {
        shapes.push_back({m, n, k});
        eff.push_back(m / (m + 64.0) * n / (n + 64.0) * k / (k + 64.0));
      }
  EXPECT_NEAR(fit_gemm_half_dim(shapes, eff), 64.0, 64.0 * 0.05);
}

}  // namespace
}  // namespace parallax
