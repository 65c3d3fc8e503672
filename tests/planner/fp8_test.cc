// FP8 as the frameworks run it: the FP8 peak, each recipe's casts and GEMM rates (delayed,
// current, rowwise, blockwise, mxfp8), the GPUs that can run each, and their export.
#include <string>

#include <gtest/gtest.h>

#include "planner/export.h"
#include "planner/memory_model.h"
#include "planner/simulation.h"
#include "program/framework.h"
#include "simulator/compute_cost.h"
#include "simulator/step_costs.h"
#include "small_plans.h"

namespace parallax {
namespace {

using testing_support::load;
using testing_support::plan;
using testing_support::round_cluster;

// FP8 GEMMs run at the FP8 peak; a GPU without one refuses the plan.
TEST(StepCosts, Fp8UsesTheFp8Peak) {
  nlohmann::json j = testing_support::round_cluster_json();
  EXPECT_NE(gpu_refusal(round_cluster(), Precision::kFp8), "");
  j["gpu"]["peak_tflops"]["fp8"] = 200;
  const ClusterSpec c = cluster_from_json(j, "round").value();
  EXPECT_EQ(gpu_refusal(c, Precision::kFp8), "");
  const Gemm g{"fc1", 4096, 4096, 4096};
  EXPECT_DOUBLE_EQ(gemm_time_s(c.gpu, Precision::kFp8, g), gemm_time_s(c.gpu, Precision::kBf16, g) / 2);
  // Weights keep FP8 copies (2 + 1 + 1 bytes), or with fp8_param_gather only the FP8 pair.
  Plan p = plan(1, 1, 1, 1, 4096);
  p.precision = Precision::kFp8;
  EXPECT_EQ(bytes_per_param(p).weights, 4);
  EXPECT_EQ(bytes_per_param(p).gathered, 2);
  p.execution.fp8_param_gather = true;
  EXPECT_EQ(bytes_per_param(p).weights, 2);
  EXPECT_EQ(bytes_per_param(p).gathered, 1);
}

// Rowwise scaling runs the FP8 GEMMs at the GPU's fp8_rowwise_gemm_fraction of tensorwise ones: at
// 0.5 a layer's forward grows by exactly its FP8 GEMMs' tensorwise time (each GEMM taking twice as
// long) over the same plan at 1, the attention core and the bf16 router unchanged. Its casts move
// 10 bytes per element against current scaling's 6 (two quantizations, along each GEMM's reduction
// axis), so at fraction 1 the rowwise layer is still the slower.
TEST(StepCosts, Fp8RowwiseScaledGemms) {
  nlohmann::json j = testing_support::round_cluster_json();
  j["gpu"]["peak_tflops"]["fp8"] = 200;
  const ClusterSpec c = cluster_from_json(j, "round").value();
  const ModelSpec m = load("llama3.1-8b");
  Plan current = plan(1, 1, 1, 1, 4096), rowwise = current;
  current.precision = rowwise.precision = Precision::kFp8;
  current.execution.fp8_recipe = Fp8Recipe::kCurrent;
  rowwise.execution.fp8_recipe = Fp8Recipe::kRowwise;
  const double rowwise_at_one_s = layer_timing(m, c, rowwise).forward_s;
  EXPECT_GT(rowwise_at_one_s, layer_timing(m, c, current).forward_s);
  j["gpu"]["fp8_rowwise_gemm_fraction"] = 0.5;
  const ClusterSpec half = cluster_from_json(j, "round").value();
  double fp8_gemms_s = 0;
  for (const Gemm& g : layer_gemms(m, GemmShape{4096, 1, 1, 1, 1}))
    if (std::string(g.name) != "scores" && std::string(g.name) != "attn_v" && std::string(g.name) != "router")
      fp8_gemms_s += gemm_time_s(half.gpu, Precision::kFp8, g);
  ASSERT_GT(fp8_gemms_s, 0);
  EXPECT_NEAR(layer_timing(m, half, rowwise).forward_s - rowwise_at_one_s, fp8_gemms_s, 1e-9 * fp8_gemms_s);
  // The recipe round-trips through JSON; Megatron has no rowwise recipe to export.
  EXPECT_EQ(plan_from_json(plan_to_json(rowwise), "j").value().execution.fp8_recipe, Fp8Recipe::kRowwise);
  rowwise.zero = 1;
  EXPECT_NE(megatron_arguments(m, rowwise).error().find("fp8_recipe rowwise"), std::string::npos);
}

// Block scaling quantizes each FP8 GEMM's input (forward) and output gradient (backward) along
// both axes in one kernel: 2 + 2 x (1 + 1/32) = 4.0625 bytes per element against delayed
// scaling's 4 (one read, an FP8 copy and its transpose), at the same GEMM rate. On the round GPU
// (1,000 GB/s) Llama-3.1-8B's layer at s = 4,096 casts the inputs of qkv, proj, fc1 and fc2 in the
// forward: 4,096 x (4,096 + 4,096 + 4,096 + 14,336) = 109,051,904 elements, so blockwise takes
// 0.0625 x that / 1e12 = 6.8157 us longer than delayed; mxfp8 exactly as long as blockwise.
TEST(StepCosts, Fp8BlockScalingCastsAlongBothAxesInOneKernel) {
  nlohmann::json j = testing_support::round_cluster_json();
  j["gpu"]["peak_tflops"]["fp8"] = 200;
  const ClusterSpec c = cluster_from_json(j, "round").value();
  const ModelSpec m = load("llama3.1-8b");
  Plan delayed = plan(1, 1, 1, 1, 4096);
  delayed.precision = Precision::kFp8;
  Plan blockwise = delayed, mxfp8 = delayed;
  blockwise.execution.fp8_recipe = Fp8Recipe::kBlockwise;
  mxfp8.execution.fp8_recipe = Fp8Recipe::kMxfp8;
  const double elements = 4096.0 * (4096 + 4096 + 4096 + 14336);
  EXPECT_NEAR(layer_timing(m, c, blockwise).forward_s - layer_timing(m, c, delayed).forward_s, 0.0625 * elements / 1e12, 1e-12);
  EXPECT_DOUBLE_EQ(layer_timing(m, c, mxfp8).forward_s, layer_timing(m, c, blockwise).forward_s);
  EXPECT_EQ(plan_from_json(plan_to_json(mxfp8), "j").value().execution.fp8_recipe, Fp8Recipe::kMxfp8);
}

// MXFP8 needs tensor cores that apply block scales (Blackwell: gpu.mxfp8); Hoppers refuse it and
// run blockwise. Megatron exports both recipes by name.
TEST(StepCosts, Mxfp8NeedsBlockScaledTensorCores) {
  nlohmann::json j = testing_support::round_cluster_json();
  j["gpu"]["peak_tflops"]["fp8"] = 200;
  const ClusterSpec hopper = cluster_from_json(j, "round").value();
  EXPECT_EQ(gpu_refusal(hopper, Precision::kFp8, Fp8Recipe::kBlockwise), "");
  EXPECT_EQ(gpu_refusal(hopper, Precision::kFp8, Fp8Recipe::kMxfp8),
            "fp8_recipe mxfp8 needs tensor cores that scale blocks themselves (Blackwell): G has none (cluster round sets no "
            "gpu.mxfp8)");
  j["gpu"]["mxfp8"] = true;
  EXPECT_EQ(gpu_refusal(cluster_from_json(j, "round").value(), Precision::kFp8, Fp8Recipe::kMxfp8), "");
  EXPECT_TRUE(load_cluster("dgx-b200").value().gpu.mxfp8);
  EXPECT_FALSE(load_cluster("dgx-h100").value().gpu.mxfp8);
  const ModelSpec m = load("llama3.1-8b");
  Plan p = plan(1, 1, 8, 1, 4096);
  p.zero = 1;
  p.precision = Precision::kFp8;
  for (const auto& [recipe, flag] : {std::pair{Fp8Recipe::kBlockwise, "blockwise"}, {Fp8Recipe::kMxfp8, "mxfp8"}}) {
    p.execution.fp8_recipe = recipe;
    const std::string args = megatron_arguments(m, p).value();
    EXPECT_NE(args.find(std::string("--fp8-recipe ") + flag), std::string::npos) << args;
  }
}

// The physics alone against torchao's published end-to-end FP8 gains (pytorch/ao@853f87d
// torchao/float8/README.md: Llama-3-8B on 8 H100s, FSDP2, torch.compile, per-op selective
// recompute, batch 1 of 8,192 tokens): tensorwise 1.25x, rowwise 1.10x over bf16. With FP8 GEMMs
// on their own measured curve Parallax predicts 1.24x and 1.14x (bf16's efficiency at twice the
// peak said 1.31x and 1.21x).
TEST(StepCosts, Fp8GainsMatchTorchaosMeasurement) {
  const ModelSpec m = load("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Plan p = plan(1, 1, 8, 1, 8192);
  p.zero = 3;
  p.recompute = Recompute::kSelective;
  p.execution = framework_profile("torchtitan").value().execution;
  p.execution.kernels = KernelFusion::kFused;
  auto step_s = [&](Precision precision, Fp8Recipe recipe) {
    Plan q = p;
    q.precision = precision;
    q.execution.fp8_recipe = recipe;
    return simulate_step(m, c, q).value().report.step_time_s;
  };
  const double bf16_s = step_s(Precision::kBf16, Fp8Recipe::kCurrent);
  EXPECT_NEAR(bf16_s / step_s(Precision::kFp8, Fp8Recipe::kCurrent), 1.25, 0.03);
  EXPECT_NEAR(bf16_s / step_s(Precision::kFp8, Fp8Recipe::kRowwise), 1.10, 0.05);
}

}  // namespace
}  // namespace parallax
