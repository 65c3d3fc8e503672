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

// Measured attention curves: seq 1024 -> 100 / 50 TFLOP/s (fwd / bwd), 4096 -> 300 / 150, at head
// dims 64 and 128. A head dim of 96 takes the nearer curve in log2 (128: 0.415 vs 0.585); at 2048,
// halfway in log2, fwd 200 and bwd 100: 2e12 FLOPs forward take 10 ms, backward 2.5 x 2e12 / 100e12
// = 50 ms. Beyond the measured lengths the end values hold; a kernel without a curve falls back to
// the flash efficiency (0.5 x 100 TFLOP/s here).
TEST(ComputeCost, AttentionFromMeasuredCurves) {
  nlohmann::json j = testing_support::round_cluster_json();
  j["gpu"]["attention"] = {{"source", "test"},
                           {"curves", {{{"kernel", "fa2"}, {"head_dim", 128}, {"seq_len", {1024, 4096}},
                                        {"fwd_tflops", {100, 300}}, {"bwd_tflops", {50, 150}}},
                                       {{"kernel", "fa2"}, {"head_dim", 64}, {"seq_len", {1024, 4096}},
                                        {"fwd_bwd_tflops", {10, 10}}}}}};
  Result<ClusterSpec> c = cluster_from_json(j, "round");
  ASSERT_TRUE(c.ok()) << c.error();
  AttentionTimes t = attention_times(c->gpu, Precision::kBf16, "fa2", 96, 2048, 2e12);
  EXPECT_TRUE(t.measured);
  EXPECT_NEAR(t.forward_s, 0.01, 1e-12);
  EXPECT_NEAR(t.backward_s, 0.05, 1e-12);
  EXPECT_NEAR(attention_times(c->gpu, Precision::kBf16, "fa2", 128, 65536, 3e12).forward_s, 0.01, 1e-12);
  EXPECT_NEAR(attention_times(c->gpu, Precision::kBf16, "fa2", 64, 2048, 1e12).backward_s, 0.25, 1e-12);
  const AttentionTimes none = attention_times(c->gpu, Precision::kBf16, "cudnn", 128, 2048, 1e12);
  EXPECT_FALSE(none.measured);
  EXPECT_DOUBLE_EQ(none.forward_s, 0.02);
  EXPECT_DOUBLE_EQ(none.backward_s, 0.05);
  j["gpu"]["attention"]["curves"][0]["bwd_tflops"] = {50};
  EXPECT_EQ(cluster_from_json(j, "round").error(),
            "round: gpu.attention.curves[0]: key 'seq_len': needs one throughput per sequence length (fwd_tflops "
            "and bwd_tflops, or fwd_bwd_tflops)");
}

// Efficiency max * prod d/(d + half): with max 0.8, half 48 and dims (4096, 1024, 48):
// 0.8 * 4096/4144 * 1024/1072 * 48/96 = 0.37768...
TEST(ComputeCost, EfficiencyFallsForSkinnyGemms) {
  GpuSpec gpu;
  gpu.gemm_max_efficiency = 0.8;
  gpu.gemm_half_dim = 48;
  gpu.sm_count = 8;  // 4096/256 x 1024/128 = 128 tiles: 16 whole waves, no quantization loss
  gpu.gemm_tile_m = 256;
  gpu.gemm_tile_n = 128;
  const double expected = 0.8 * 4096.0 / 4144.0 * 1024.0 / 1072.0 * 0.5;
  EXPECT_DOUBLE_EQ(gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 48}), expected);
  EXPECT_LT(gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 48}), gemm_efficiency(gpu, Gemm{"g", 4096, 1024, 4096}));
}

// Wave quantization: 4096 x 1152 has 16 x 9 = 144 tiles of 256 x 128; on 8 SMs that is 18 waves,
// exact. 4096 x 1088 has 16 x 9 tiles too (the last column 64 wide): useful 4096*1088 of
// 144 * 256 * 128 = 0.9444. On 10 SMs 144 tiles take 15 waves (150 slots): 1152-wide gives 0.96.
TEST(ComputeCost, WaveQuantization) {
  GpuSpec gpu;
  gpu.sm_count = 8;
  gpu.gemm_tile_m = 256;
  gpu.gemm_tile_n = 128;
  EXPECT_DOUBLE_EQ(wave_efficiency(gpu, Gemm{"g", 4096, 1152, 64}), 1.0);
  EXPECT_DOUBLE_EQ(wave_efficiency(gpu, Gemm{"g", 4096, 1088, 64}), 4096.0 * 1088 / (144.0 * 256 * 128));
  gpu.sm_count = 10;
  EXPECT_DOUBLE_EQ(wave_efficiency(gpu, Gemm{"g", 4096, 1152, 64}), 144.0 / 150.0);
  // Small dimensions shrink the tile (in steps of 16): a 40 x 40 output uses one 48 x 48 tile.
  EXPECT_DOUBLE_EQ(wave_efficiency(gpu, Gemm{"g", 40, 40, 64}), 1600.0 / (10 * 48.0 * 48.0));
}

}  // namespace
}  // namespace parallax
