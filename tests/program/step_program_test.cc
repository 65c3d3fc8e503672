// The step program by hand: the rank layout, the ops of small plans with their names, streams,
// bytes (nccl-tests accounting) and waits.
#include "program/model_state.h"
#include "program/step_program.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

ModelSpec tiny_gpt() { return load_model(std::string(PARALLAX_SOURCE_DIR) + "/tests/data/tiny-gpt.json").value(); }

std::vector<std::string> names(const StageProgram& s) {
  std::vector<std::string> out;
  for (const ProgramOp& op : s.ops) out.push_back(op_name(op));
  return out;
}

// TP 2 x DP 3 x PP 2: rank 9 = pp 1 * 6 + dp 1 * 2 + tp 1. Its TP group holds ranks 8 and 9
// (color 9 / 2 = 4), its DP group ranks 7, 9, 11 (color pp * t + tp = 3), its PP group ranks 3
// and 9 (color dp * t + tp = 3); first and last stage form the embedding group.
TEST(RankGrid, LayoutAndGroups) {
  const RankGrid g(2, 3, 2);
  EXPECT_EQ(g.coords(9), (RankCoords{1, 1, 1}));
  EXPECT_EQ(g.rank({1, 1, 1}), 9);
  EXPECT_EQ(g.group(GroupKind::kTp, 9).color, 4);
  EXPECT_EQ(g.group(GroupKind::kDp, 9).color, 3);
  EXPECT_EQ(g.group(GroupKind::kDp, 9).key, 1);
  EXPECT_EQ(g.group(GroupKind::kPp, 9).color, 3);
  EXPECT_EQ(g.group(GroupKind::kPp, 3).color, 3);
  EXPECT_EQ(g.group(GroupKind::kEmbedding, 9).color, 3);
  EXPECT_EQ(g.stride(GroupKind::kDp), 2);
  EXPECT_EQ(g.stride(GroupKind::kPp), 6);
  EXPECT_EQ(g.representative(1), 6);
  // Middle stages are in no embedding group.
  EXPECT_EQ(RankGrid(1, 1, 3).group(GroupKind::kEmbedding, 1).color, -1);
}

// nccl-tests accounting for S = 1000 bytes over n = 4: all-reduce 2 * 3/4 * 1000 = 1500,
// reduce-scatter and all-gather 750, send 1000; a group of one sends nothing.
TEST(Collective, BytesPerRank) {
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllReduce, 1000, 4), 1500);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kReduceScatter, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllGather, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kSendRecv, 1000, 4), 1000);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllReduce, 1000, 1), 0);
}

// 1F1B, pp 2, m 2, tiny GPT (4 layers, h 32, tied embeddings), fp32, s 16, b 1. Stage 0 runs
// F0 F1 B0 B1 and stage 1 F0 B0 F1 B1; each pipeline transfer is s b h 4 bytes = 2048 bytes. With
// no overlap the tied-embedding all-reduce follows the last backward, then the optimizer.
TEST(StepProgram, OneF1BTwoStagesByHand) {
  Plan p;
  p.pp = 2, p.global_batch = 2, p.seq_len = 16, p.precision = Precision::kFp32;
  const StepProgram prog = build_step_program(tiny_gpt(), p);
  EXPECT_DOUBLE_EQ(prog.boundary_bytes, 16 * 32 * 4);
  EXPECT_EQ(names(prog.stages[0]),
            (std::vector<std::string>{"F mb=0 chunk=0", "send pp F mb=0 chunk=0", "F mb=1 chunk=0",
                                      "send pp F mb=1 chunk=0", "recv pp B mb=0 chunk=0", "B mb=0 chunk=0",
                                      "recv pp B mb=1 chunk=0", "B mb=1 chunk=0", "allreduce embedding", "optimizer"}));
  EXPECT_EQ(names(prog.stages[1]),
            (std::vector<std::string>{"recv pp F mb=0 chunk=0", "F mb=0 chunk=0", "B mb=0 chunk=0",
                                      "send pp B mb=0 chunk=0", "recv pp F mb=1 chunk=0",
                                      "F mb=1 chunk=0", "B mb=1 chunk=0", "send pp B mb=1 chunk=0",
                                      "allreduce embedding", "optimizer"}));
  const StageProgram& s0 = prog.stages[0];
  // F1 waits for the blocking send of F0's output; B0 for its gradient's receive.
  EXPECT_EQ(std::vector<int32_t>(s0.ops[2].waits_for.begin(), s0.ops[2].waits_for.end()), (std::vector<int32_t>{1}));
  EXPECT_EQ(std::vector<int32_t>(s0.ops[5].waits_for.begin(), s0.ops[5].waits_for.end()), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(s0.ops[1].stream, StreamKind::kPpSend);
  EXPECT_EQ(s0.ops[1].peer, 1);
  EXPECT_DOUBLE_EQ(s0.ops[1].sent_bytes, 2048);
  EXPECT_TRUE(s0.ops[5].frees_activations);
  EXPECT_FALSE(s0.ops[0].frees_activations);
  // The embedding all-reduce over the first and last stage: V = 128 rows of h = 32, fp32
  // gradients: 128 * 32 * 4 = 16384 bytes; over 2 ranks each sends 2 * 1/2 of it.
  EXPECT_DOUBLE_EQ(s0.ops[8].bytes, 16384);
  EXPECT_DOUBLE_EQ(s0.ops[8].sent_bytes, 16384);
}

// DP 2, ZeRO-1, tiny GPT on one stage. Parameters: layers 4 x (LayerNorm 2 x 64 + QKV 32 x 96 + 96
// + proj 32 x 32 + 32 + FC1 32 x 128 + 128 + FC2 128 x 32 + 32) = 4 x 12,704 = 50,816, embedding
// 128 x 32 = 4096, positions 16 x 32 = 512, final norm 64: 55,488 parameters, fp32 gradients 4 bytes:
// 221,952 bytes, below one 40 MiB bucket. So one reduce-scatter of 221,952 bytes (each rank sends
// half: 110,976), the optimizer, and one all-gather of the 4-byte weights.
TEST(StepProgram, ZeroOneBucketsByHand) {
  Plan p;
  p.dp = 2, p.zero = 1, p.global_batch = 2, p.seq_len = 16, p.precision = Precision::kFp32;
  const StepProgram prog = build_step_program(tiny_gpt(), p);
  const StageProgram& s = prog.stages[0];
  EXPECT_EQ(names(s), (std::vector<std::string>{"F mb=0 chunk=0", "B mb=0 chunk=0", "reduce-scatter dp bucket=0",
                                                "optimizer", "all-gather dp bucket=0"}));
  EXPECT_DOUBLE_EQ(s.ops[2].bytes, 221952);
  EXPECT_DOUBLE_EQ(s.ops[2].sent_bytes, 110976);
  EXPECT_EQ(s.ops[2].stream, StreamKind::kDp);
  EXPECT_DOUBLE_EQ(s.ops[4].bytes, 221952);
  // Buckets of 0.1 MiB = 104,857.6 bytes: ceil(221,952 / 104,857.6) = 3 per chunk.
  p.execution.dp_bucket_mib = 0.1;
  p.execution.overlap_grad_reduce = true;
  const StageProgram o = build_step_program(tiny_gpt(), p).stages[0];
  EXPECT_EQ(names(o), (std::vector<std::string>{"F mb=0 chunk=0", "B mb=0 chunk=0", "reduce-scatter dp bucket=0",
                                                "reduce-scatter dp bucket=1", "reduce-scatter dp bucket=2", "optimizer",
                                                "all-gather dp bucket=0", "all-gather dp bucket=1", "all-gather dp bucket=2"}));
  // With overlap each bucket waits for its share of the backward: 1/3, 2/3, all of it.
  EXPECT_FLOAT_EQ(o.ops[2].first_wait_fraction, 1.0f / 3);
  EXPECT_FLOAT_EQ(o.ops[4].first_wait_fraction, 1.0f);
  // overlap_param_gather: the gathers open the step (the previous optimizer's, under this forward)
  // and the first pass waits for the first bucket only.
  p.execution.overlap_param_gather = true;
  const StageProgram g = build_step_program(tiny_gpt(), p).stages[0];
  EXPECT_EQ(names(g), (std::vector<std::string>{"all-gather dp bucket=0", "all-gather dp bucket=1", "all-gather dp bucket=2",
                                                "F mb=0 chunk=0", "B mb=0 chunk=0", "reduce-scatter dp bucket=0",
                                                "reduce-scatter dp bucket=1", "reduce-scatter dp bucket=2", "optimizer"}));
  EXPECT_EQ(g.ops[3].waits_for.size(), 1u);
  EXPECT_EQ(g.ops[3].waits_for[0], 0);
  // bucket_range: 10 elements in 3 buckets of ceil(10/3) = 4: [0,4) [4,8) [8,10).
  EXPECT_EQ(bucket_range(10, 3, 2).begin, 8);
  EXPECT_EQ(bucket_range(10, 3, 2).end, 10);
}

// TP 2 with SP, fp32, b s h = 16 x 32 x 4 = 2048 bytes per collective: a forward runs per layer an
// all-gather and a reduce-scatter around each of attention and MLP (4 collectives of 2048 bytes,
// each sending half), so 4 layers send 4 x 4 x 1024 = 16,384 bytes; the backward as much, plus W's
// two re-gathers per layer (4 x 2 x 1024 = 8,192): 24,576. The norms' partial gradients are then
// summed over TP once per chunk.
// Megatron-Core's default buckets: max(40M, 1M x DP) parameters with overlap_grad_reduce, on the
// first stage only. GPT-2's 124,439,808 bf16 gradients are 248,879,616 bytes: over DP 8 buckets of
// 40M x 2 = 80e6 bytes, ceil(3.11) = 4; over DP 64 of 64M x 2 = 128e6 bytes, ceil(1.94) = 2. A
// later pipeline stage, or no overlap, takes one bucket.
TEST(StepProgram, MegatronCoreBucketsByHand) {
  const ModelSpec m = load_model("gpt2").value();
  Plan p;
  p.dp = 8, p.zero = 1, p.global_batch = 64;
  p.execution.megatron_buckets = p.execution.overlap_grad_reduce = true;
  EXPECT_EQ(dp_buckets_per_chunk(m, p, 0), 4);
  p.dp = 64;
  EXPECT_EQ(dp_buckets_per_chunk(m, p, 0), 2);
  EXPECT_EQ(dp_buckets_per_chunk(m, p, 1), 1);
  p.execution.overlap_grad_reduce = false;
  EXPECT_EQ(dp_buckets_per_chunk(m, p, 0), 1);
}

TEST(StepProgram, TensorAndSequenceParallelTraffic) {
  Plan p;
  p.tp = 2, p.sequence_parallel = true, p.global_batch = 1, p.seq_len = 16, p.precision = Precision::kFp32;
  const StepProgram prog = build_step_program(tiny_gpt(), p);
  const StageProgram& s = prog.stages[0];
  EXPECT_EQ(names(s), (std::vector<std::string>{"F mb=0 chunk=0", "B mb=0 chunk=0", "allreduce tp norms chunk=0", "optimizer"}));
  EXPECT_DOUBLE_EQ(s.ops[0].sent_bytes, 16384);
  EXPECT_DOUBLE_EQ(s.ops[1].sent_bytes, 24576);
  EXPECT_EQ(tp_event_name(s.ops[0]), "tp F mb=0 chunk=0");
}

// ZeRO-2 over one data rank shards nothing: the SP norm gradients are summed once after the last
// backward, not after each micro-batch (which, with nothing to reduce them away, summed the
// earlier micro-batches' sums again).
TEST(StepProgram, ZeroTwoOnOneDataRankReducesNormsOnce) {
  Plan p;
  p.tp = 2, p.sequence_parallel = true, p.zero = 2, p.global_batch = 2, p.seq_len = 16;
  const StageProgram s = build_step_program(tiny_gpt(), p).stages[0];
  EXPECT_EQ(names(s), (std::vector<std::string>{"F mb=0 chunk=0", "B mb=0 chunk=0", "F mb=1 chunk=0", "B mb=1 chunk=0",
                                                "allreduce tp norms chunk=0", "optimizer"}));
}

// ZeRO-3: the weights are gathered before every F and B and each backward's gradients
// reduce-scattered after it, unit (layer) by unit: with tiny-gpt's 4 layers a pass waits for 1/4
// of its gather, a gather may start at 3/4 of the pass before (one unit ahead), and a reduction
// at 1/4 of its backward.
TEST(StepProgram, ZeroThreeGathersAroundEveryPass) {
  Plan p;
  p.dp = 2, p.zero = 3, p.micro_batch = 1, p.global_batch = 4, p.seq_len = 16;
  const StageProgram s = build_step_program(tiny_gpt(), p).stages[0];
  EXPECT_EQ(names(s), (std::vector<std::string>{"all-gather dp F mb=0 chunk=0", "F mb=0 chunk=0",
                                                "all-gather dp B mb=0 chunk=0", "B mb=0 chunk=0",
                                                "reduce-scatter dp mb=0 chunk=0", "all-gather dp F mb=1 chunk=0",
                                                "F mb=1 chunk=0", "all-gather dp B mb=1 chunk=0", "B mb=1 chunk=0",
                                                "reduce-scatter dp mb=1 chunk=0", "optimizer"}));
  EXPECT_TRUE(s.ops[0].waits_for.empty());  // the step's first gather
  auto waits = [&](size_t op, int32_t on, float fraction) {
    ASSERT_EQ(s.ops[op].waits_for.size(), 1u) << op;
    EXPECT_EQ(s.ops[op].waits_for[0], on) << op;
    EXPECT_FLOAT_EQ(s.ops[op].first_wait_fraction, fraction) << op;
  };
  waits(1, 0, 0.25f);  // F0 on its gather's first unit
  waits(2, 1, 0.75f);  // B0's gather from F0's last unit on
  waits(3, 2, 0.25f);
  waits(4, 3, 0.25f);  // the reduction from B0's first unit on
  waits(5, 3, 0.75f);  // F1's gather from B0's last unit on
}

// ZeRO-3 with interleaving gathers and reduces each pass's chunk only. tiny-gpt (h 32, 4 layers,
// vocab 128, 16 positions, tied) on PP 2 x 2 chunks has one layer per chunk: 12,704 parameters
// (qkv 3,168, proj 1,056, fc 4,224, fc proj 4,128, two norms 128), 2 bytes each in bf16.
//   stage 0 chunk 0 (virtual stage 0): + the embeddings 4,096 + 512 -> 17,312 x 2 = 34,624 bytes;
//   stage 0 chunk 1 (virtual stage 2): 25,408 bytes;
//   stage 1 chunk 1 (virtual stage 3): + final norm 64 + the tied embedding's copy 4,096 -> 33,728.
TEST(StepProgram, ZeroThreeMovesOnlyThePassChunk) {
  Plan p;
  p.pp = 2, p.dp = 2, p.zero = 3, p.schedule = Schedule::kInterleaved, p.virtual_stages = 2;
  p.micro_batch = 1, p.global_batch = 4, p.seq_len = 16;
  ASSERT_TRUE(check_plan(p, tiny_gpt(), 8).ok()) << check_plan(p, tiny_gpt(), 8).error();
  const StepProgram prog = build_step_program(tiny_gpt(), p);
  auto bytes = [&](int64_t stage, const std::string& name) {
    for (const ProgramOp& op : prog.stages[stage].ops)
      if (op_name(op) == name) return op.bytes;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(bytes(0, "all-gather dp F mb=0 chunk=0"), 34624);
  EXPECT_DOUBLE_EQ(bytes(0, "all-gather dp F mb=0 chunk=1"), 25408);
  EXPECT_DOUBLE_EQ(bytes(0, "reduce-scatter dp mb=0 chunk=1"), 25408);
  EXPECT_DOUBLE_EQ(bytes(1, "all-gather dp B mb=1 chunk=1"), 33728);
  const StageParams whole = stage_param_split(tiny_gpt(), p, 0);
  EXPECT_DOUBLE_EQ(whole.total(), chunk_param_split(tiny_gpt(), p, 0, 0).total() + chunk_param_split(tiny_gpt(), p, 0, 1).total());
}

// Hybrid sharding, TP 2 x DP 4 with dp_shard 2: rank 5 (tp 1, dp 2) shards with dp 3 (rank 7):
// color (pp * 2 + dp / 2) * t + tp = 3, key dp % 2 = 0; it holds the same shard as dp 0 (rank 1):
// replica color (pp * 2 + dp % 2) * t + tp = 1, key dp / 2 = 1, members t * s = 4 ranks apart.
TEST(RankGrid, HybridShardingGroups) {
  const RankGrid g(2, 4, 1, 2);
  EXPECT_EQ(g.group(GroupKind::kDp, 5).color, g.group(GroupKind::kDp, 7).color);
  EXPECT_NE(g.group(GroupKind::kDp, 5).color, g.group(GroupKind::kDp, 1).color);
  EXPECT_EQ(g.group(GroupKind::kDp, 5).key, 0);
  EXPECT_EQ(g.group(GroupKind::kDpReplica, 5).color, g.group(GroupKind::kDpReplica, 1).color);
  EXPECT_EQ(g.group(GroupKind::kDpReplica, 5).key, 1);
  EXPECT_EQ(g.group_size(GroupKind::kDp), 2);
  EXPECT_EQ(g.group_size(GroupKind::kDpReplica), 2);
  EXPECT_EQ(g.stride(GroupKind::kDpReplica), 4);
  EXPECT_EQ(RankGrid(2, 4, 1).group_size(GroupKind::kDpReplica), 1);
}

// HSDP: each micro-batch's reduce-scatter within the shard group of 2 is followed by the
// all-reduce of its half over the 2 replicas: 221,952 / 2 bytes, sending 2 * 1/2 of that.
TEST(StepProgram, HybridShardingAllReducesTheShardOverReplicas) {
  Plan p;
  p.dp = 4, p.dp_shard = 2, p.zero = 3, p.micro_batch = 1, p.global_batch = 4, p.seq_len = 16, p.precision = Precision::kFp32;
  ASSERT_TRUE(check_plan(p, tiny_gpt(), 8).ok());
  const StageProgram s = build_step_program(tiny_gpt(), p).stages[0];
  EXPECT_EQ(names(s), (std::vector<std::string>{"all-gather dp F mb=0 chunk=0", "F mb=0 chunk=0",
                                                "all-gather dp B mb=0 chunk=0", "B mb=0 chunk=0",
                                                "reduce-scatter dp mb=0 chunk=0", "allreduce dp-replica mb=0 chunk=0",
                                                "optimizer"}));
  EXPECT_DOUBLE_EQ(s.ops[5].bytes, 221952 / 2.0);
  EXPECT_DOUBLE_EQ(s.ops[5].sent_bytes, 221952 / 2.0);
  EXPECT_EQ(s.ops[5].group, GroupKind::kDpReplica);
  p.dp_shard = 3;
  EXPECT_EQ(check_plan(p, tiny_gpt(), 8).error(), "invalid plan: dp_shard 3 must divide dp 4 and needs zero >= 1 (zero 3)");
}

}  // namespace
}  // namespace parallax
