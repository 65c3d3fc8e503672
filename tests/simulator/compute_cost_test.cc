#include "simulator/compute_cost.h"

#include <gtest/gtest.h>

#include "test_cluster.h"

namespace parallax {
namespace {

TEST(ComputeCost, RooflineOnRoundCluster) {
  const ClusterSpec c = cluster_from_json(testing_support::round_cluster_json(), "round").value();
  // 1024^3 GEMM: 2 * 1024^3 = 2.147e9 FLOPs at 100 TFLOP/s, efficiency 1: 21.47 us.
  const Gemm g{"g", 1024, 1024, 1024};
  EXPECT_DOUBLE_EQ(gemm_efficiency(c.gpu, g), 1.0);
  EXPECT_DOUBLE_EQ(gemm_time_s(c.gpu, Precision::kBf16, g), 2.0 * 1024 * 1024 * 1024 / 100e12);
  // fp32 peak is 10 TFLOP/s: ten times slower.
  EXPECT_DOUBLE_EQ(gemm_time_s(c.gpu, Precision::kFp32, g), 2.0 * 1024 * 1024 * 1024 / 10e12);
  // 1 GB at 1,000 GB/s: 1 ms.
  EXPECT_DOUBLE_EQ(memory_time_s(c.gpu, 1e9), 1e-3);
  // 1 TFLOP of fused attention at 0.5 x 100 TFLOP/s: 20 ms.
  EXPECT_DOUBLE_EQ(flash_attention_time_s(c.gpu, Precision::kBf16, 1e12), 0.02);
}

// Efficiency max * prod d/(d + half): with max 0.8, half 48 and dims (4096, 1024, 48):
// 0.8 * 4096/4144 * 1024/1072 * 48/96 = 0.37768...
TEST(ComputeCost, EfficiencyFallsForSkinnyGemms) {
  GpuSpec gpu;
  gpu.gemm_max_efficiency = 0.8;
  gpu.gemm_half_dim = 48;
  const double expected = 0.8 * 4096.0 / 4144.0 * 1024.0 / 1072.0 * 0.5;
  EXPECT_DOUBLE_EQ(gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 48}), expected);
  EXPECT_LT(gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 48}), gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 4096}));
}

}  // namespace
}  // namespace parallax
