// The two ends of the model as each framework runs them: the loss over the vocabulary-parallel
// logits (the HBM bytes it moves per logit, what that costs the last stage) and the embedding's
// dense gradient (the first stage), and where the choices are written and read.
#include <gtest/gtest.h>

#include "program/framework.h"
#include "simulator/step_costs.h"
#include "small_plans.h"

namespace parallax {
namespace {

using testing_support::load;
using testing_support::plan;
using testing_support::round_cluster;

// bf16 logits (2 bytes), by hand from each implementation's ops (simulator/step_costs.cc):
// fused: read 2 + write the fp32 softmax 4 + its max and sum 4 = 10; backward read 4 write 2 = 6.
// megatron: .float() 2 + 4, max 4, -= 8, exp 8, sum 4, div_ 8 = 38; backward mul_ 8, narrow 6 = 14.
// megatron-fused: .float() with max 6, -= exp sum 8, div_ 8 = 22; backward read 4 write 2 = 6.
// eager (bf16 as it is): log_softmax 3 reads + 1 write of 2 = 8; backward zero-fill 2, sum 2,
// grad - exp(out) x sum 6 = 10. eager-fp32: widen 6 + 16 = 22; backward 4 + 16 + narrow 6 = 26.
TEST(LossKernel, BytesPerLogit) {
  const auto bytes = [](LossKernel k, double b) {
    const LossBytes l = loss_bytes_per_logit(k, b);
    return std::make_pair(l.forward, l.backward);
  };
  EXPECT_EQ(bytes(LossKernel::kFused, 2), std::make_pair(10.0, 6.0));
  EXPECT_EQ(bytes(LossKernel::kMegatron, 2), std::make_pair(38.0, 14.0));
  EXPECT_EQ(bytes(LossKernel::kMegatronFused, 2), std::make_pair(22.0, 6.0));
  EXPECT_EQ(bytes(LossKernel::kEager, 2), std::make_pair(8.0, 10.0));
  EXPECT_EQ(bytes(LossKernel::kEagerFp32, 2), std::make_pair(22.0, 26.0));
  // fp32 logits are not widened or narrowed: megatron 32 / 8, megatron-fused 4 + 16 = 20 / 8,
  // eager-fp32 16 / 20, the same as eager at 4 bytes.
  EXPECT_EQ(bytes(LossKernel::kMegatron, 4), std::make_pair(32.0, 8.0));
  EXPECT_EQ(bytes(LossKernel::kMegatronFused, 4), std::make_pair(20.0, 8.0));
  EXPECT_EQ(bytes(LossKernel::kEagerFp32, 4), bytes(LossKernel::kEager, 4));
}

// Llama 3 8B (vocab 128,256), TP 2, 4,096 tokens, bf16, on the round GPU (1,000 GB/s at
// efficiency 1): 4,096 x 64,128 = 262,668,288 logits a rank. Megatron's unfused loss moves
// 38 - 10 = 28 bytes more each forward and 14 - 6 = 8 more backward than the fused one:
// 7.354712064 ms and 2.101346304 ms. Only the last stage's edge pays it.
TEST(LossKernel, LastStageTime) {
  const ModelSpec m = load("llama3-8b");
  const ClusterSpec c = round_cluster();
  Plan p = plan(2, 1, 1, 1, 4096);
  const EdgeTiming fused = edge_timing(m, c, p);
  p.execution.loss = LossKernel::kMegatron;
  const EdgeTiming megatron = edge_timing(m, c, p);
  EXPECT_NEAR(megatron.last_forward_s - fused.last_forward_s, 7.354712064e-3, 1e-12);
  EXPECT_NEAR(megatron.last_backward_input_s - fused.last_backward_input_s, 2.101346304e-3, 1e-12);
  EXPECT_DOUBLE_EQ(megatron.last_backward_weight_s, fused.last_backward_weight_s);
  EXPECT_DOUBLE_EQ(megatron.first_forward_s, fused.first_forward_s);
}

// The same model and plan: the rank's embedding table is 64,128 x 4,096 = 262,668,288 elements.
// A dense gradient zero-filled at 2 bytes, read again at 2 and added into fp32 gradients (read and
// write 4 each): 12 bytes an element, 3.152019456 ms at 1,000 GB/s; with bf16 gradients 8 bytes,
// 2.101346304 ms. Only the first stage's backward pays it, once per micro-batch.
TEST(LossKernel, DenseEmbeddingGradient) {
  const ModelSpec m = load("llama3-8b");
  const ClusterSpec c = round_cluster();
  Plan p = plan(2, 1, 1, 1, 4096);
  const EdgeTiming scattered = edge_timing(m, c, p);
  p.execution.dense_embedding_grad = true;
  p.execution.fp32_gradients = true;
  const EdgeTiming dense = edge_timing(m, c, p);
  EXPECT_NEAR(dense.first_backward_s - scattered.first_backward_s, 3.152019456e-3, 1e-12);
  EXPECT_DOUBLE_EQ(dense.first_forward_s, scattered.first_forward_s);
  EXPECT_DOUBLE_EQ(dense.last_backward_input_s, scattered.last_backward_input_s);
  p.execution.fp32_gradients = false;
  EXPECT_NEAR(edge_timing(m, c, p).first_backward_s - scattered.first_backward_s, 2.101346304e-3, 1e-12);
  EXPECT_TRUE(plan_from_json(plan_to_json(p), "p.json")->execution.dense_embedding_grad);
  for (const std::string& fw : framework_names()) EXPECT_TRUE(framework_profile(fw).value().execution.dense_embedding_grad) << fw;
  EXPECT_FALSE(Execution{}.dense_embedding_grad);  // Parallax's runtimes scatter rows into the gradient
}

// Each profile names the loss its code runs; a plan states it as execution.loss, and an unknown
// one is a one-line error naming the key and the choices.
TEST(LossKernel, ProfilesAndPlanFiles) {
  const auto loss_of = [](const char* fw) { return framework_profile(fw).value().execution.loss; };
  EXPECT_EQ(loss_of("megatron"), LossKernel::kMegatron);
  EXPECT_EQ(loss_of("megatron-2022"), LossKernel::kMegatron);
  EXPECT_EQ(loss_of("nemo"), LossKernel::kMegatron);
  EXPECT_EQ(loss_of("fsdp"), LossKernel::kEager);
  EXPECT_EQ(loss_of("deepspeed"), LossKernel::kEagerFp32);
  EXPECT_EQ(loss_of("torchtitan"), LossKernel::kEagerFp32);
  EXPECT_EQ(Execution{}.loss, LossKernel::kFused);  // Parallax's own runtimes
  Plan p = plan(2, 1, 1, 1, 4096);
  p.execution.loss = LossKernel::kMegatronFused;
  nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["execution"]["loss"], "megatron-fused");
  EXPECT_EQ(plan_from_json(j, "p.json")->execution.loss, LossKernel::kMegatronFused);
  j["execution"]["loss"] = "liger";
  EXPECT_EQ(plan_from_json(j, "p.json").error(),
            "p.json: execution: key 'loss': unknown value 'liger' (expected fused|megatron|megatron-fused|eager|eager-fp32)");
}

}  // namespace
}  // namespace parallax
