// Multi-token prediction (DeepSeek-V3's num_nextn_predict_layers, Megatron's --mtp-num-layers):
// one more layer, eh_proj, norms and a second pass through the output head and loss, all on the
// last pipeline stage, which then also holds a copy of the embedding.
#include <gtest/gtest.h>

#include "models/layer_cost.h"
#include "program/model_state.h"
#include "simulator/step_costs.h"
#include "small_plans.h"

namespace parallax {
namespace {

using testing_support::load;
using testing_support::plan;
using testing_support::round_cluster;

ModelSpec without_mtp(ModelSpec m) {
  m.mtp_layers = 0;
  return m;
}

// DeepSeek-V3's one depth: an MoE layer of 11,507,286,272 weights (layer_params), eh_proj 2 x 7,168^2
// = 102,760,448 and three norms of 7,168: 11,610,068,224, on top of the 671,026,419,200 of the model
// (DeepSeek reports 671B, and 14B for the MTP module in its 685B checkpoint, which stores its own
// copies of the embedding and head, 2 x 129,280 x 7,168 = 1.85B, that Parallax shares). Model FLOPs
// per token add the layer's 3 x 1,506,148,352 and 6 x (2 x 7,168^2 + 7,168 x 129,280) for eh_proj
// and the head: 4,518,445,056 + 6,176,636,928 = 10,695,081,984.
TEST(MultiTokenPrediction, ParametersAndFlops) {
  const ModelSpec ds = load("deepseek-v3");
  ASSERT_EQ(ds.mtp_layers, 1);
  EXPECT_EQ(layer_params(ds).total(), 11507286272);
  EXPECT_EQ(mtp_params(ds).total(), 11610068224);
  EXPECT_EQ(total_params(without_mtp(ds)), 671026419200);
  EXPECT_EQ(total_params(ds), 682636487424);
  EXPECT_NEAR(model_flops_per_step(ds, 4096, 1) - model_flops_per_step(without_mtp(ds), 4096, 1),
              10695081984.0 * 4096, 1e3);
}

// On 4 stages, TP 2 and EP 8, the last stage adds the depth's dense weights over TP (216,006,656 +
// 102,760,448 split; 16,990,464 + 21,504 replicated), its experts over expert TP (TP's 2 by default) and
// EP (11,274,289,152 / 16) and the
// embedding's copy (129,280 x 7,168 / 2); the other stages hold what they did. Its activations add
// the layer's and, per token, the norms' and eh_proj's inputs (8h / t with SP) and the head's again.
TEST(MultiTokenPrediction, LastStageHoldsTheDepthAndTheEmbedding) {
  const ModelSpec ds = load("deepseek-v3"), ds0 = without_mtp(ds);
  Plan p = plan(2, 1, 8, 8, 4096);
  p.pp = 4;
  p.sequence_parallel = true;
  const StageParams with = stage_param_split(ds, p, 3), without = stage_param_split(ds0, p, 3);
  EXPECT_DOUBLE_EQ(with.dense - without.dense, (216006656.0 + 102760448) / 2 + 16990464 + 21504 + 129280.0 * 7168 / 2);
  EXPECT_DOUBLE_EQ(with.expert - without.expert, 11274289152.0 / 16);
  for (int64_t s : {0, 1, 2}) EXPECT_DOUBLE_EQ(stage_params_per_gpu(ds, p, s), stage_params_per_gpu(ds0, p, s));
  EXPECT_TRUE(last_stage_holds_embedding(ds, p));
  EXPECT_FALSE(last_stage_holds_embedding(ds0, p));
  const ActivationOptions o = activation_options(p);
  EXPECT_DOUBLE_EQ(last_stage_extra_activation_bytes(ds, o) - last_stage_extra_activation_bytes(ds0, o),
                   layer_activation_bytes(ds, o).total() + 4096.0 * 8 * 7168 / 2 + last_stage_extra_activation_bytes(ds0, o));
}

// The round GPU (100 TFLOP/s, perfect GEMMs, 1,000 GB/s), TP 1, 4,096 tokens: eh_proj is 2 x 4,096 x
// 7,168 x 14,336 = 841,813,590,016 FLOPs, 8.41813590016 ms each way; a norm reads and writes 2h bf16 a
// token, 4 x 4,096 x 7,168 x 2 bytes = 0.234881024 ms. The depth adds to the last stage's forward two
// norms, eh_proj, the layer's forward and the head's again; to its input gradients four norms,
// eh_proj, the layer's and the head's; to its weight gradients eh_proj, the layer's and the head's.
TEST(MultiTokenPrediction, LastStageRunsTheDepth) {
  const ModelSpec ds = load("deepseek-v3");
  const ClusterSpec c = round_cluster();
  const Plan p = plan(1, 1, 8, 8, 4096);
  const EdgeTiming with = edge_timing(ds, c, p), head = edge_timing(without_mtp(ds), c, p);
  const LayerTiming layer = layer_timing(ds, c, p);
  const double eh_s = 8.41813590016e-3, norm_s = 0.234881024e-3;
  EXPECT_NEAR(with.last_forward_s, 2 * head.last_forward_s + 2 * norm_s + eh_s + layer.forward_s, 1e-12);
  EXPECT_NEAR(with.last_backward_input_s, 2 * head.last_backward_input_s + 4 * norm_s + eh_s + layer.backward_input_s, 1e-12);
  EXPECT_NEAR(with.last_backward_weight_s, 2 * head.last_backward_weight_s + eh_s + layer.backward_weight_s, 1e-12);
  EXPECT_DOUBLE_EQ(with.first_forward_s, head.first_forward_s);
}

}  // namespace
}  // namespace parallax
