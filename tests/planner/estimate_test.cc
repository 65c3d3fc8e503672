#include "planner/estimate.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "../simulator/test_cluster.h"
#include "planner/lowering.h"
#include "program/step_program.h"
#include "simulator/step_costs.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }
ClusterSpec round() { return cluster_from_json(testing_support::round_cluster_json(), "round").value(); }

Plan gpt2_plan(int64_t tp) {
  Plan p;
  p.tp = tp;
  p.seq_len = 1024;
  p.global_batch = 8;
  p.execution.attention = AttentionKernel::kMaterialized;
  return p;
}

// GPT-2 124M, s 1024, b 1, t 1 on the round cluster (100 TFLOP/s, perfect GEMMs, 1,000 GB/s):
//   weight GEMMs: 2 * 12h^2 * 1024 tokens = 1.4495514624e10 FLOPs -> 144.955 us
//   attention core: 4 s h * 1024 = 3.221225472e9 FLOPs -> 32.212 us
//   elementwise: 145,920 B/token * 1024 = 149,422,080 B -> 149.422 us
//   forward = 326.590 us; B = GEMMs + 2 core + 1.5 elementwise = 433.513 us; W = 144.955 us.
TEST(LayerTiming, HandDerivedOnRoundCluster) {
  const ModelSpec m = load("gpt2");
  const LayerTiming t = layer_timing(m, round(), gpt2_plan(1));
  const double gemm = 2.0 * 12 * 768 * 768 * 1024 / 100e12, core = 4.0 * 1024 * 768 * 1024 / 100e12,
               elem = 145920.0 * 1024 / 1e12;
  EXPECT_NEAR(t.forward_s, gemm + core + elem, 1e-12);
  EXPECT_NEAR(t.backward_input_s, gemm + 2 * core + 1.5 * elem, 1e-12);
  EXPECT_NEAR(t.backward_weight_s, gemm, 1e-12);
  EXPECT_DOUBLE_EQ(t.tp_bytes, 0);
  // Full recompute re-runs the forward inside the backward.
  Plan full = gpt2_plan(1);
  full.recompute = Recompute::kFull;
  EXPECT_NEAR(layer_timing(m, round(), full).backward_input_s, t.backward_input_s + t.forward_s, 1e-12);
  // On a quarter of the layers: a quarter of a forward per layer, on average.
  full.execution.recompute_fraction = 0.25;
  EXPECT_NEAR(layer_timing(m, round(), full).backward_input_s, t.backward_input_s + 0.25 * t.forward_s, 1e-12);
  // Selective recompute re-runs the attention core and, materialized, its softmax and dropout:
  // 4as + 5as = 9 * 12 * 1024 = 110,592 B/token.
  Plan sel = gpt2_plan(1);
  sel.recompute = Recompute::kSelective;
  EXPECT_NEAR(layer_timing(m, round(), sel).backward_input_s,
              t.backward_input_s + core + 110592.0 * 1024 / 1e12, 1e-12);
}

// TP 2: each all-reduce carries tokens * h * 2 B = 1,572,864 B: 2(n-1) alpha + 2(n-1)/n S / busbw
// = 2 us + 15.72864 us; four per layer (two forward, two backward), each sending S bytes per rank.
TEST(LayerTiming, TensorParallelAllReduces) {
  const ModelSpec m = load("gpt2");
  const LayerTiming t = layer_timing(m, round(), gpt2_plan(2));
  const double ar = 2e-6 + 1572864.0 / 100e9;
  EXPECT_NEAR(t.tp_comm_s, 4 * ar, 1e-15);
  EXPECT_DOUBLE_EQ(t.tp_bytes, 4 * 1572864.0);
}

// TP 2 with SP, FP8: the gathers carry one byte an element (S/2), the reduce-scatters two (S).
// One ring step over 2 ranks: alpha + S'/2 / busbw. Per pass, attention and MLP each gather and
// reduce-scatter: 2 (1 us + 3.93216 us) + 2 (1 us + 7.86432 us) = 27.59296 us; W re-gathers the
// two inputs: 2 (1 us + 3.93216 us) = 9.86432 us. Bytes sent: S/4 per gather, S/2 per
// reduce-scatter: 4 x 3/4 S forward and backward, 2 x S/4 in W = 5,505,024. Rowwise scaling
// gathers in bf16: 4 x 8.86432 us per pass, W 17.72864 us, bytes 7,864,320.
TEST(LayerTiming, Fp8SequenceParallelGathersOneByteAnElement) {
  const ModelSpec m = load("gpt2");
  Plan p = gpt2_plan(2);
  p.sequence_parallel = true;
  p.precision = Precision::kFp8;
  const LayerTiming t = layer_timing(m, round(), p);
  EXPECT_NEAR(t.tp_forward_s, 27.59296e-6, 1e-15);
  EXPECT_NEAR(t.tp_backward_input_s, 27.59296e-6, 1e-15);
  EXPECT_NEAR(t.tp_backward_weight_s, 9.86432e-6, 1e-15);
  EXPECT_NEAR(t.tp_bytes, 5505024.0, 1e-6);
  p.execution.fp8_recipe = Fp8Recipe::kRowwise;
  const LayerTiming rowwise = layer_timing(m, round(), p);
  EXPECT_NEAR(rowwise.tp_forward_s, 4 * 8.86432e-6, 1e-15);
  EXPECT_NEAR(rowwise.tp_backward_weight_s, 17.72864e-6, 1e-15);
  EXPECT_NEAR(rowwise.tp_bytes, 7864320.0, 1e-6);
}

// TP 8 inside a node that runs NVLS (160 GB/s busbw over 8 GPUs, 10 us, from 5 ranks) on the round
// cluster's 100 GB/s, 1 us rings; S = 1,572,864 B. An all-reduce: ring 14 us + 1.75 S / 100 GB/s =
// 41.52512 us, tree 14 us + 2 S / 100 GB/s = 45.45728 us, NVLS 10 us + S / (160 x 8/14 GB/s) =
// 27.2032 us: two per pass, 54.4064 us. With SP the same bytes go as an all-gather and a
// reduce-scatter, rings both (NVLS serves only all-reduce): 7 us + 0.875 S / 100 GB/s = 20.76256 us
// each, four per pass, 83.05024 us.
TEST(LayerTiming, NvlsServesTensorParallelAllReducesNotSpPairs) {
  const ModelSpec m = load("gpt2");
  ClusterSpec c = round();
  c.node.nvls_busbw_gbps = 160;
  c.node.nvls_latency_us = 10;
  c.node.nvls_min_ranks = 5;
  Plan p = gpt2_plan(8);
  EXPECT_NEAR(layer_timing(m, c, p).tp_forward_s, 54.4064e-6, 1e-15);
  p.sequence_parallel = true;
  EXPECT_NEAR(layer_timing(m, c, p).tp_forward_s, 83.05024e-6, 1e-15);
}

StageTimes uniform(double f, double b, double w) { return {f, b, w}; }

// VALIDATION.md section 3: uniform stages, GPipe and 1F1B take (m + p - 1) T, a bubble of
// (p-1)/(m+p-1); interleaved (m + (p-1)/v) T; ZB-H1 with F = B = W fills with (p-1)(F+B-W) = (p-1)T/3.
TEST(Pipeline, ClosedFormBubbles) {
  Plan p;
  p.pp = 4;
  const StageTimes t = uniform(1, 1, 1);  // T = 3
  double bubble = 0;
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    p.schedule = s;
    EXPECT_DOUBLE_EQ(pipeline_time_s(p, 8, t, t, &bubble), (8 + 3) * 3.0);
    EXPECT_DOUBLE_EQ(bubble, 3.0 / 11.0);
  }
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 3;
  EXPECT_DOUBLE_EQ(pipeline_time_s(p, 8, t, t, &bubble), (8 + 1.0) * 3.0);
  EXPECT_DOUBLE_EQ(bubble, 1.0 / 9.0);  // idle (p-1)/(v m) = 1/8 of the ideal time
  p.schedule = Schedule::kZbH1;
  p.virtual_stages = 1;
  EXPECT_DOUBLE_EQ(pipeline_time_s(p, 8, t, t, &bubble), 8 * 3.0 + 3 * 1.0);
  EXPECT_DOUBLE_EQ(bubble, 3.0 / 27.0);  // a third of 1F1B's idle time
}

TEST(StepReport, SingleGpuStepIsComputePlusOptimizer) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = round();
  Plan p = gpt2_plan(1);
  const StepReport e = estimate_step(m, c, p);
  EXPECT_DOUBLE_EQ(e.bubble_fraction, 0);
  EXPECT_DOUBLE_EQ(e.dp_exposed_s, 0);
  EXPECT_DOUBLE_EQ(e.comm_bytes_per_gpu.tp + e.comm_bytes_per_gpu.pp + e.comm_bytes_per_gpu.dp, 0);
  // The optimizer's passes touch 4 g + 30 = 38 bytes per parameter (g = 2) at 1,000 GB/s.
  EXPECT_NEAR(e.optimizer_s, 124439808.0 * 38 / 1e12, 1e-12);
  EXPECT_NEAR(e.step_time_s, e.pipeline_s + e.optimizer_s, 1e-15);
  EXPECT_DOUBLE_EQ(e.tokens_per_s, 8 * 1024 / e.step_time_s);
  EXPECT_NEAR(e.mfu, e.model_flops / e.step_time_s / 100e12, 1e-12);
  EXPECT_GT(e.hardware_flops, 0);
}

// ZeRO-3 with offload on one GPU: the 124,439,808 weights (2 bytes) come from host memory before
// every F and B, at the round cluster's 20 GB/s PCIe: 248,879,616 / 20e9 = 12.444 ms per pass, in the
// step program as the weight-gather op (even with DP 1) and in the estimate as its exposure.
TEST(StepReport, OffloadedWeightsCrossPcieEveryPass) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = round();
  Plan p = gpt2_plan(1);
  p.zero = 3, p.offload = true, p.global_batch = 1;
  const StepProgram prog = build_step_program(m, p);
  const ProgramOp& gather = prog.stages[0].ops[0];
  ASSERT_EQ(op_name(gather), "all-gather dp F mb=0 chunk=0");
  const OpCosts costs(m, c, p);
  EXPECT_NEAR(costs.duration_s(gather, 0), 124439808.0 * 2 / 20e9, 1e-12);
  const StepReport e = estimate_step(m, c, p);
  EXPECT_GT(e.dp_exposed_s, 124439808.0 * 2 / 20e9);  // the first gather has nothing to hide behind
}

// ZeRO-3 over DP 4 in one node of the round cluster (100 GB/s, 1 us per ring step), GPT-2's 12
// layers, N = 124,439,808 weights of 2 bytes: each pass's gather goes one layer at a time, 12
// all-gathers of 2N / 12 bytes: 12 * 3 * 1 us + 0.75 * 2N / 100 GB/s = 36 us + 1,866.597 us.
// The lowering cuts it at 1/12 and the pass starts after that first unit, not the whole gather;
// the reduction (2 bytes a gradient here) starts after its backward's first twelfth.
TEST(StepReport, ZeroThreeGathersUnitByUnit) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = round();
  Plan p = gpt2_plan(1);
  p.dp = 4, p.zero = 3;
  const OpCosts costs(m, c, p);
  const LoweredStep low = lower_step(m, p, costs);
  const std::vector<ProgramOp>& ops = low.program.stages[0].ops;
  ASSERT_EQ(op_name(ops[0]), "all-gather dp F mb=0 chunk=0");
  ASSERT_EQ(op_name(ops[1]), "F mb=0 chunk=0");
  const double gather_s = 36e-6 + 0.75 * 2 * 124439808.0 / 100e9;
  EXPECT_NEAR(costs.duration_s(ops[0], 0), gather_s, 1e-12);
  const TaskId head = low.first_task[0][0];
  EXPECT_NE(head, low.last_task[0][0]);
  EXPECT_NEAR(low.graph.duration_s(head), gather_s / 12, 1e-10);  // the fraction is a float
  const auto& deps = low.graph.dependencies();
  const TaskId f0 = low.first_task[0][1];
  EXPECT_NE(std::find(deps.begin(), deps.end(), std::pair{head, f0}), deps.end());
  EXPECT_EQ(std::find(deps.begin(), deps.end(), std::pair{low.last_task[0][0], f0}), deps.end());
  // The estimate: the dp stream's 2 gathers and a reduction per micro-batch hide beneath its
  // passes; what stays exposed is each pass's first unit, 2 x 2 x gather / 12 for m = 8 / 4.
  const StepReport e = estimate_step(m, c, p);
  EXPECT_NEAR(e.dp_exposed_s, 2 * 2 * gather_s / 12, 1e-9);
}

// FSDP2 copies each gathered layer into its parameters before the forward and the backward. GPT-2's
// layer holds 12 x 768^2 + 13 x 768 = 7,087,872 parameters; read and written in bf16 at 1,000 GB/s
// that is 4 x 7,087,872 / 1e12 = 28.351488 us in each pass. ZeRO below 3 gathers nothing per unit.
Plan gpt2_zero3_plan() {
  Plan p = gpt2_plan(1);
  p.dp = 2, p.zero = 3, p.global_batch = 16;
  return p;
}

TEST(StepReport, Fsdp2CopiesTheGatheredLayerOut) {
  const ModelSpec m = load("gpt2");
  Plan p = gpt2_zero3_plan();
  const LayerTiming views = layer_timing(m, round(), p);
  p.execution.gather_copy_out = true;
  const LayerTiming copies = layer_timing(m, round(), p);
  EXPECT_NEAR(copies.forward_s - views.forward_s, 28.351488e-6, 1e-12);
  EXPECT_NEAR(copies.backward_input_s - views.backward_input_s, 28.351488e-6, 1e-12);
  p.zero = 2;
  EXPECT_DOUBLE_EQ(layer_timing(m, round(), p).forward_s, views.forward_s);
}

// FSDP2 copies each layer's bf16 gradients into the reduce-scatter's input once its backward is
// done: GPT-2's 7,087,872 layer parameters read at 2 bytes and written at 4 (fp32 reduction), at
// 1,000 GB/s 6 x 7,087,872 / 1e12 = 42.527232 us; written at 2 (bf16 reduction), 28.351488 us.
// Without sharded gradients (ZeRO 1) nothing is reduce-scattered per unit.
TEST(StepReport, Fsdp2CopiesTheGradientsIntoTheReduceScatter) {
  const ModelSpec m = load("gpt2");
  Plan p = gpt2_zero3_plan();
  const LayerTiming in_place = layer_timing(m, round(), p);
  p.execution.reduce_copy_in = true;
  EXPECT_NEAR(layer_timing(m, round(), p).backward_weight_s - in_place.backward_weight_s, 28.351488e-6, 1e-12);
  p.execution.fp32_gradients = true;
  const LayerTiming fp32 = layer_timing(m, round(), p);
  p.execution.reduce_copy_in = false;
  EXPECT_NEAR(fp32.backward_weight_s - layer_timing(m, round(), p).backward_weight_s, 42.527232e-6, 1e-12);
  EXPECT_DOUBLE_EQ(fp32.forward_s, in_place.forward_s);
  p.execution.reduce_copy_in = true, p.zero = 1;
  EXPECT_DOUBLE_EQ(layer_timing(m, round(), p).backward_weight_s, in_place.backward_weight_s);
}

// DP 4 (one node), ZeRO 0: an all-reduce of 2 bytes per parameter, exposed without overlap.
TEST(StepReport, DataParallelTraffic) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = round();
  Plan p = gpt2_plan(1);
  p.dp = 4;
  const double grads = 2.0 * 124439808;
  StepReport e = estimate_step(m, c, p);
  EXPECT_NEAR(e.dp_exposed_s, 6e-6 + 1.5 * grads / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(e.comm_bytes_per_gpu.dp, 1.5 * grads);
  // ZeRO-3 with m = 2 micro-batches: 2 x (2 all-gathers + 1 reduce-scatter), 0.75 S each.
  p.zero = 3;
  e = estimate_step(m, c, p);
  EXPECT_DOUBLE_EQ(e.comm_bytes_per_gpu.dp, 2 * 3 * 0.75 * grads);
  // Overlapping the reduction with the last backward never exposes more of it.
  Plan plain = gpt2_plan(1);
  plain.dp = 4;
  Plan overlap = plain;
  overlap.execution.overlap_grad_reduce = true;
  EXPECT_LT(estimate_step(m, c, overlap).dp_exposed_s, estimate_step(m, c, plain).dp_exposed_s);
}

// fp32_gradients on the same GPT-2 plan (N = 124,439,808 parameters, DP 4 in one node: S bytes
// cost 2(n-1)/n S = 1.5 S per rank for an all-reduce, (n-1)/n S = 0.75 S for a reduce-scatter or
// all-gather, over 100 GB/s with 1 us per hop):
//   ZeRO 0: all-reduce of 4N instead of 2N: 1.5 * 4N sent, 6 us + 1.5 * 4N / 100 GB/s exposed;
//   ZeRO 1: reduce-scatter of 4N + all-gather of the 2-byte weights 2N: 0.75 * 6N (was 0.75 * 4N);
//   ZeRO 3, m = 2: 2 x (2 all-gathers of 2N + a reduce-scatter of 4N) = 1.5 * 8N (was 1.5 * 6N);
//   optimizer: 4 g + 30 = 46 bytes per parameter (g = 4).
TEST(StepReport, Fp32GradientsDoubleTheGradientTraffic) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = round();
  const double n = 124439808;
  Plan p = gpt2_plan(1);
  p.dp = 4;
  p.execution.fp32_gradients = true;
  StepReport e = estimate_step(m, c, p);
  EXPECT_NEAR(e.dp_exposed_s, 6e-6 + 1.5 * 4 * n / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(e.comm_bytes_per_gpu.dp, 1.5 * 4 * n);
  p.execution.fp32_gradients = false;
  EXPECT_DOUBLE_EQ(estimate_step(m, c, p).comm_bytes_per_gpu.dp, 1.5 * 2 * n);
  p.execution.fp32_gradients = true;
  p.zero = 1;
  EXPECT_DOUBLE_EQ(estimate_step(m, c, p).comm_bytes_per_gpu.dp, 0.75 * 6 * n);
  p.zero = 3;
  EXPECT_DOUBLE_EQ(estimate_step(m, c, p).comm_bytes_per_gpu.dp, 1.5 * 8 * n);
  // One GPU: no DP traffic, but the optimizer reads and zeroes 4-byte gradients.
  Plan one = gpt2_plan(1);
  one.execution.fp32_gradients = true;
  EXPECT_NEAR(estimate_step(m, c, one).optimizer_s, n * 46 / 1e12, 1e-12);
}

}  // namespace
}  // namespace parallax
