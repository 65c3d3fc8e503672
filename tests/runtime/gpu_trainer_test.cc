// The GPU trainer against the CPU trainer, the shared reference state: the same plan on the same
// tiny models must give the same losses — fp32 within 1e-4 relative over 3 steps (only the order
// of summation differs: cuBLAS, the fused attention), bf16 and fp16 within 3e-2 (activations and
// weights rounded to 8 or 11 mantissa bits, a relative error of about 2^-8 per op that the loss
// averages). The plan checks run without a device; the training tests skip without one.
#include <cmath>

#include <gtest/gtest.h>

#include "kernels/cuda/common.h"
#include "runtime/cuda/gpu_model.h"
#include "runtime/cuda/gpu_trainer.h"
#include "runtime/cuda/stand_in_communicator.h"
#include "runtime/trainer.h"
#include "thread_communicator.h"

namespace parallax {
namespace {

// data_dir(), not the build's source path: on the GPU machine the tree lives elsewhere and
// gpu_check.sh points PARALLAX_DATA_DIR at it.
ModelSpec tiny(const std::string& name) {
  return load_model(data_dir() + "/tests/data/" + name + ".json").value();
}

Plan plan(Precision precision, int64_t micro_batch = 2) {
  Plan p;
  p.micro_batch = micro_batch;
  p.global_batch = 4;
  p.seq_len = 16;
  p.precision = precision;
  return p;
}

std::vector<double> cpu_losses(const ModelSpec& m, const Plan& p, int steps) {
  auto world = make_self_communicator();
  std::unique_ptr<Trainer> t = Trainer::create(m, p, *world, TrainOptions{}).value();
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(t->step(s).loss);
  return out;
}

std::vector<double> gpu_losses(const ModelSpec& m, const Plan& p, int steps, int emulate_rank = -1) {
  StandInCommunicator world(static_cast<int>(p.gpus()), 0);
  GpuTrainOptions o;
  o.emulate_rank = emulate_rank;
  Result<std::unique_ptr<GpuTrainer>> t = GpuTrainer::create(m, p, emulate_rank >= 0 ? nullptr : &world, o);
  EXPECT_TRUE(t.ok()) << t.error();
  std::vector<double> out;
  for (int s = 0; t.ok() && s < steps; ++s) out.push_back((*t)->step(s).value().loss);
  return out;
}

// The GPU model lays out exactly the CPU model's tensors (names, sizes, order) for every shard,
// each at a 128-element boundary and none overlapping: exact initialization and the equivalence
// tests rest on it. Needs no device.
TEST(GpuModel, LayoutIsTheCpuModelsParameters) {
  for (const char* name : {"tiny-gpt", "tiny-llama"})
    for (int tp : {1, 2})
      for (int pp : {1, 2})
        for (int stage = 0; stage < pp; ++stage) {
          const ModelSpec m = tiny(name);
          GpuModelOptions o;
          o.tp = tp, o.tp_rank = tp - 1, o.pp = pp, o.pp_rank = stage;
          const std::vector<GpuTensor> gpu = GpuModel<float>::tensor_layout(m, o).value();
          Transformer cpu = Transformer::create(m, tp, tp - 1, 1234, pp, stage, 1).value();
          const std::vector<Param*> params = cpu.params();
          ASSERT_EQ(gpu.size(), params.size()) << name << " tp " << tp << " pp " << pp << " stage " << stage;
          int64_t end = 0;
          for (size_t i = 0; i < gpu.size(); ++i) {
            EXPECT_EQ(gpu[i].name, params[i]->name);
            EXPECT_EQ(gpu[i].size, params[i]->size) << gpu[i].name;
            EXPECT_EQ(gpu[i].tp_replicated, params[i]->tp_replicated) << gpu[i].name;
            EXPECT_EQ(gpu[i].sp_partial, params[i]->sp_partial) << gpu[i].name;
            EXPECT_EQ(gpu[i].offset % 128, 0) << gpu[i].name;
            EXPECT_GE(gpu[i].offset, end) << gpu[i].name;
            end = gpu[i].offset + gpu[i].size;
          }
        }
}

TEST(GpuTrainer, RefusesWhatItCannotExecute) {
  const ModelSpec m = tiny("tiny-gpt");
  Plan p = plan(Precision::kBf16);
  p.zero = 2;
  EXPECT_NE(check_gpu_support(m, p).error().find("ZeRO-2"), std::string::npos);
  p.zero = 1, p.pp = 2;
  EXPECT_TRUE(check_gpu_support(m, p).ok());
  p.schedule = Schedule::kInterleaved, p.virtual_stages = 2;
  EXPECT_NE(check_gpu_support(m, p).error().find("interleaved"), std::string::npos);
  p.schedule = Schedule::k1F1B, p.virtual_stages = 1, p.offload = true;
  EXPECT_NE(check_gpu_support(m, p).error().find("offload"), std::string::npos);
  // ZB-H1 over 3 stages: its send/receive groups pair up (program/pipeline_exchange.h).
  p.offload = false, p.schedule = Schedule::kZbH1, p.pp = 3, p.global_batch = 6;
  EXPECT_TRUE(check_gpu_support(m, p).ok());
  // What only the CPU runtime or only the cost model knows.
  EXPECT_NE(check_gpu_support(tiny("tiny-nemotron"), plan(Precision::kBf16)).error().find("nemotron"), std::string::npos);
  EXPECT_TRUE(check_gpu_support(tiny("tiny-llama"), plan(Precision::kBf16)).ok());
  Plan hybrid = plan(Precision::kBf16);
  hybrid.dp = 4, hybrid.dp_shard = 2, hybrid.zero = 1, hybrid.global_batch = 8;
  EXPECT_NE(check_gpu_support(m, hybrid).error().find("hybrid sharding"), std::string::npos);
  // ZeRO-1 with several gradient buckets: each rank keeps its piece of every bucket.
  Plan buckets = plan(Precision::kBf16);
  buckets.dp = 2, buckets.zero = 1, buckets.global_batch = 8, buckets.execution.dp_bucket_mib = 0.01;
  ASSERT_GT(dp_buckets_per_chunk(m, buckets, 0), 1);
  EXPECT_TRUE(check_gpu_support(m, buckets).ok()) << check_gpu_support(m, buckets).error();
}

TEST(GpuTrainer, MatchesTheCpuTrainerInFp32) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const ModelSpec m = tiny(name);
    const Plan p = plan(Precision::kFp32);
    const std::vector<double> cpu = cpu_losses(m, p, 3), gpu = gpu_losses(m, p, 3);
    ASSERT_EQ(gpu.size(), cpu.size()) << name;
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << name << " step " << i;
  }
}

// Full recompute, and ZeRO-1's sharded optimizer path (one shard: the padded whole model).
TEST(GpuTrainer, RecomputeAndZero1MatchTheCpuTrainer) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const ModelSpec m = tiny("tiny-llama");
  for (int variant = 0; variant < 2; ++variant) {
    Plan p = plan(Precision::kFp32);
    if (variant == 0) p.recompute = Recompute::kFull;
    else p.zero = 1;
    const std::vector<double> cpu = cpu_losses(m, p, 3), gpu = gpu_losses(m, p, 3);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << variant << " step " << i;
  }
}

TEST(GpuTrainer, MixedPrecisionFollowsFp32) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-gpt", "tiny-llama"})
    for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
      const ModelSpec m = tiny(name);
      const std::vector<double> ref = cpu_losses(m, plan(Precision::kFp32), 3), got = gpu_losses(m, plan(precision), 3);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i)
        EXPECT_NEAR(got[i], ref[i], 3e-2 * ref[i]) << name << " " << precision_name(precision) << " step " << i;
    }
}

// Rank emulation: the last stage of a TP 2 x PP 2 plan computes a finite, positive loss (the
// stand-ins leave partial sums, so the value differs from the real plan's; the work does not).
TEST(GpuTrainer, EmulatesOneRankOfALargerPlan) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  Plan p = plan(Precision::kBf16, 1);
  p.tp = 2, p.pp = 2, p.global_batch = 4;
  const std::vector<double> losses = gpu_losses(tiny("tiny-llama"), p, 2, /*rank: tp 1, pp 1=*/3);
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_GT(losses[0], 0.0);
}

// DP 2 (ZeRO 0: all-reduce buckets overlapping the last backward on their own stream; ZeRO-1: a
// reduce-scatter, a sharded AdamW and a weight all-gather) and SP under TP 2, emulated: every op
// of the step is recorded with a start and a duration, and the losses stay finite.
TEST(GpuTrainer, EmulatedDataAndSequenceParallelStepsAreTimed) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (int zero : {0, 1}) {
    Plan p = plan(Precision::kBf16, 1);
    p.tp = 2, p.dp = 2, p.zero = zero, p.sequence_parallel = true;
    GpuTrainOptions o;
    o.emulate_rank = 1;
    std::unique_ptr<GpuTrainer> t = GpuTrainer::create(tiny("tiny-gpt"), p, nullptr, o).value();
    for (int step = 0; step < 2; ++step) EXPECT_TRUE(std::isfinite(t->step(step).value().loss)) << "ZeRO " << zero;
    // Every op of the rank's program is recorded, in program order.
    const StageProgram& stage = t->program().stages[0];
    ASSERT_EQ(t->last_step_ops().size(), stage.ops.size());
    int backward = 0, dp = 0;
    for (size_t i = 0; i < stage.ops.size(); ++i) {
      const OpRecord& r = t->last_step_ops()[i];
      EXPECT_EQ(r.op, static_cast<int32_t>(i));
      EXPECT_GE(r.start_s, 0.0) << record_name(stage, r);
      EXPECT_GE(r.duration_s, 0.0) << record_name(stage, r);
      backward += stage.ops[i].type == ProgramOpType::kCompute && stage.ops[i].pass == OpKind::kBackward;
      dp += stage.ops[i].role == CollectiveRole::kGradientBucket;
    }
    EXPECT_EQ(backward, 2);  // 4 sequences over DP 2 in micro-batches of 1
    EXPECT_EQ(dp, 1) << "ZeRO " << zero;
    EXPECT_GT(t->dp_bytes(), 0);
    EXPECT_GT(t->tp_bytes(), 0);
  }
}

// Real DP ranks on one GPU: every rank a thread of this process, with real sums between them
// (tests/runtime/thread_communicator.h). All ranks report the step's loss; they must agree.
std::vector<double> thread_rank_losses(const ModelSpec& m, const Plan& p, int steps) {
  std::vector<std::vector<double>> losses(static_cast<size_t>(p.gpus()));
  const int ranks = static_cast<int>(p.gpus());
  const std::string error = testing_support::run_thread_ranks(ranks, [&](DeviceCommunicator& world) {
    GpuTrainOptions o;
    o.watchdog_s = 600;  // a rank waits while the others run their share of the step
    Result<std::unique_ptr<GpuTrainer>> t = GpuTrainer::create(m, p, &world, o);
    if (!t.ok()) throw std::runtime_error(t.error());
    for (int s = 0; s < steps; ++s) {
      Result<StepStats> stats = (*t)->step(s);
      if (!stats.ok()) throw std::runtime_error(stats.error());
      losses[static_cast<size_t>(world.rank())].push_back(stats->loss);
    }
  });
  EXPECT_EQ(error, "");
  for (const std::vector<double>& rank : losses) EXPECT_EQ(rank, losses[0]);
  return losses[0];
}

// ZeRO-1 over DP 2 with several gradient buckets (10 KiB buckets cut the tiny model's gradients
// into many, their pieces crossing tensor boundaries): per bucket a reduce-scatter, AdamW on each
// rank's pieces, per bucket a weight all-gather — the same losses as ZeRO 0's all-reduced buckets
// (the same sums and the same element-wise AdamW; only the gradient norm adds up in another
// order), with the buckets launched after the backward and beside it (overlap_grad_reduce). In
// fp32 both also match the CPU trainer on one rank over the same global batch.
TEST(GpuTrainer, Zero1WithSeveralBucketsMatchesZero0OverDataParallelRanks) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const ModelSpec m = tiny("tiny-llama");
  const std::vector<double> cpu = cpu_losses(m, plan(Precision::kFp32, 1), 3);
  for (Precision precision : {Precision::kFp32, Precision::kBf16})
    for (bool overlap : {false, true}) {
      Plan p = plan(precision, 1);
      p.dp = 2, p.execution.dp_bucket_mib = 0.01, p.execution.overlap_grad_reduce = overlap;
      ASSERT_GT(dp_buckets_per_chunk(m, p, 0), 4);
      Plan zero1 = p;
      zero1.zero = 1;
      const std::vector<double> ref = thread_rank_losses(m, p, 3), got = thread_rank_losses(m, zero1, 3);
      const std::string what = std::string(precision_name(precision)) + (overlap ? " overlapped" : "");
      ASSERT_EQ(ref.size(), 3u) << what;
      ASSERT_EQ(got.size(), 3u) << what;
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_NEAR(got[i], ref[i], 1e-5 * ref[i]) << what << " step " << i;
        if (precision == Precision::kFp32) {
          EXPECT_NEAR(ref[i], cpu[i], 1e-4 * cpu[i]) << what << " step " << i;
        }
      }
    }
}

// ZB-H1's W passes on one stage (each B followed by its W): B launches the data-gradient GEMMs,
// W the weight-gradient GEMMs B left. The losses are the CPU trainer's in fp32, also over DP 2
// with the gradient buckets launched from inside W (overlap_grad_reduce).
TEST(GpuTrainer, ZeroBubbleWeightPassesMatchTheCpuTrainer) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const ModelSpec m = tiny(name);
    Plan p = plan(Precision::kFp32);
    p.schedule = Schedule::kZbH1;
    const std::vector<double> cpu = cpu_losses(m, plan(Precision::kFp32), 3), gpu = gpu_losses(m, p, 3);
    ASSERT_EQ(gpu.size(), cpu.size()) << name;
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << name << " step " << i;
  }
  const ModelSpec m = tiny("tiny-llama");
  Plan dp = plan(Precision::kFp32, 1);
  dp.dp = 2, dp.schedule = Schedule::kZbH1, dp.execution.overlap_grad_reduce = true, dp.execution.dp_bucket_mib = 0.01;
  const std::vector<double> cpu = cpu_losses(m, plan(Precision::kFp32, 1), 3), got = thread_rank_losses(m, dp, 3);
  ASSERT_EQ(got.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(got[i], cpu[i], 1e-4 * cpu[i]) << "dp 2 step " << i;
}

}  // namespace
}  // namespace parallax
