#include "program/plan.h"

#include <gtest/gtest.h>

#include "../planner/test_plans.h"
#include "program/framework.h"
#include "program/model_state.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }

Plan base() { return testing_support::interleaved_plan(2); }

TEST(Plan, JsonRoundTrip) {
  Plan p = base();
  p.offload = true;
  p.precision = Precision::kFp16;
  p.execution.attention = AttentionKernel::kMaterialized;
  p.execution.overlap_grad_reduce = true;
  p.execution.dp_bucket_mib = 25;
  p.execution.fp32_gradients = true;
  Result<Plan> back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(plan_to_json(*back), plan_to_json(p));
  EXPECT_EQ(back->micro_batches(), 16);  // 64 / (2 * 2)
  EXPECT_TRUE(back->execution.fp32_gradients);
  EXPECT_EQ(plan_to_json(p)["execution"]["fp32_gradients"], true);
  // Absent, it keeps its default (off), so older plan files read as before.
  nlohmann::json j = plan_to_json(p);
  j["execution"].erase("fp32_gradients");
  EXPECT_FALSE(plan_from_json(j, "p.json")->execution.fp32_gradients);
}

// A plan names its framework: the profile's settings apply, explicit keys override them, and an
// unknown name is an error listing the known ones.
TEST(Plan, ExecutionFrameworkProfile) {
  nlohmann::json j = plan_to_json(base());
  j["execution"] = {{"framework", "torchtitan"}};
  Result<Plan> p = plan_from_json(j, "p.json");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->execution.kernels, KernelFusion::kEager);
  EXPECT_EQ(p->execution.selective, SelectiveRecompute::kOps);
  EXPECT_TRUE(p->execution.fp32_gradients);
  j["execution"]["kernels"] = "fused";  // torch.compile
  EXPECT_EQ(plan_from_json(j, "p.json")->execution.kernels, KernelFusion::kFused);
  EXPECT_EQ(plan_to_json(*plan_from_json(j, "p.json"))["execution"]["framework"], "torchtitan");
  j["execution"] = {{"framework", "jax"}};
  EXPECT_EQ(plan_from_json(j, "p.json").error(),
            "p.json: execution: key 'framework': unknown framework 'jax' (known: megatron, megatron-2022, nemo, deepspeed, fsdp, torchtitan)");
  for (const std::string& name : framework_names()) {
    Result<FrameworkProfile> f = framework_profile(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_FALSE(f->settings.empty()) << name;
    for (const FrameworkSetting& s : f->settings) EXPECT_FALSE(s.source.empty()) << name << " " << s.key;
  }
}

// What each framework runs, in one line each.
TEST(Plan, FrameworkRefusals) {
  const ModelSpec llama = load("llama2-70b");
  Plan p = base();  // TP 8 x PP 4 x DP 2, interleaved, ZeRO-1, SP, selective
  EXPECT_EQ(framework_refusal("megatron", p, llama), "");
  EXPECT_EQ(framework_refusal("deepspeed", p, llama), "deepspeed pipelines run 1f1b only, not interleaved");
  EXPECT_EQ(framework_refusal("fsdp", p, llama), "fsdp alone has no tensor or pipeline parallelism (tp and pp 1)");
  EXPECT_EQ(framework_refusal("torchtitan", p, llama), "torchtitan runs DDP (zero 0) or FSDP2 (zero 3), not zero 1");
  EXPECT_EQ(framework_refusal("", p, llama), "");
  p.schedule = Schedule::kZbH1, p.virtual_stages = 1;
  EXPECT_EQ(framework_refusal("nemo", p, llama), "nemo pipelines run 1f1b or interleaved, not zb-h1");
  p.schedule = Schedule::k1F1B, p.zero = 2;
  EXPECT_EQ(framework_refusal("megatron", p, llama), "megatron runs ZeRO 2 as Megatron-FSDP, without pipeline parallelism (pp 1), not pp 4");
  EXPECT_EQ(framework_refusal("nemo", p, llama), "nemo runs ZeRO 0 or 1 (the distributed optimizer), not 2");
  p.pp = 1, p.dp = 8;
  EXPECT_EQ(framework_refusal("megatron", p, llama), "megatron overlaps Megatron-FSDP's gathers and reductions only with overlap_grad_reduce");
  p.execution.overlap_grad_reduce = true;
  EXPECT_EQ(framework_refusal("megatron", p, llama), "");
  p.pp = 4, p.dp = 2, p.execution.overlap_grad_reduce = false;
  p.zero = 1, p.sequence_parallel = false;  // Megatron-Core asserts SP for MoE under TP
  EXPECT_EQ(framework_refusal("megatron", p, load("mixtral-8x7b")), "megatron needs sequence_parallel for MoE with tp > 1");
}

// bf16 optimizer states: main copy, m and v at 2 bytes each.
TEST(Plan, Bf16OptimizerStates) {
  Plan p = base();
  EXPECT_EQ(bytes_per_param(p).optimizer, 12);
  p.execution.bf16_optimizer_states = true;
  EXPECT_EQ(bytes_per_param(p).optimizer, 6);
  EXPECT_EQ(plan_from_json(plan_to_json(p), "p.json")->execution.bf16_optimizer_states, true);
}

// Llama 3 405B as Meta split it (126 layers on 16 stages, one layer fewer on the first and the
// last): 7 + 14 x 8 + 7 = 126; stage 5 holds layers [7 + 4 x 8, +8) = [39, 47).
TEST(Plan, UnevenStages) {
  Plan p;
  p.pp = 16, p.global_batch = 16, p.first_stage_layers = 7, p.last_stage_layers = 7;
  ModelSpec m = load("llama3.1-405b");
  ASSERT_EQ(m.layers, 126);
  EXPECT_TRUE(check_plan(p, m, 8).ok()) << check_plan(p, m, 8).error();
  EXPECT_EQ(p.chunk_layers(126, 0).count, 7);
  EXPECT_EQ(p.chunk_layers(126, 5).first, 39);
  EXPECT_EQ(p.chunk_layers(126, 5).count, 8);
  EXPECT_EQ(p.chunk_layers(126, 15).first, 119);
  EXPECT_EQ(p.max_stage_layers(126), 8);
  // Only the first given: the other 15 stages share 126 - 6 = 120 as 8 each.
  p.last_stage_layers = 0, p.first_stage_layers = 6;
  EXPECT_EQ(p.chunk_layers(126, 15).count, 8);
  EXPECT_EQ(plan_from_json(plan_to_json(p), "p.json")->first_stage_layers, 6);
  p.first_stage_layers = 5;  // 121 over 15 stages
  EXPECT_EQ(check_plan(p, m, 8).error(),
            "invalid plan: first_stage_layers 5 and last_stage_layers 0 need pp >= 2 without interleaving and must "
            "leave the other stages an equal share (at least 1) of num_layers 126 (pp 16)");
  // Even splits keep their own rule and message.
  p.first_stage_layers = 0;
  EXPECT_EQ(check_plan(p, m, 8).error(), "invalid plan: num_layers 126 is not divisible by pp 16 x virtual_stages 1");
}

TEST(Plan, ValidPlanPasses) { EXPECT_TRUE(check_plan(base(), load("llama2-70b"), 8).ok()); }

// Each constraint, with the line the user sees.
TEST(Plan, ViolationsNameTheConstraint) {
  const ModelSpec llama = load("llama2-70b");  // 64 heads, 8 KV heads, 80 layers, f 28672
  auto error = [&](auto edit) {
    Plan p = base();
    edit(p);
    Status s = check_plan(p, llama, 8);
    return s.ok() ? std::string("ok") : s.error();
  };
  EXPECT_EQ(error([](Plan& p) { p.tp = 16; }),
            "invalid plan: tp 16 does not divide num_key_value_heads 8");
  EXPECT_EQ(error([](Plan& p) { p.tp = 3; }), "invalid plan: tp 3 does not divide num_attention_heads 64");
  EXPECT_EQ(error([](Plan& p) { p.virtual_stages = 3; }),
            "invalid plan: num_layers 80 is not divisible by pp 4 x virtual_stages 3");
  EXPECT_EQ(error([](Plan& p) { p.global_batch = 65; }),
            "invalid plan: global_batch 65 is not divisible by micro_batch 2 x dp 2 (m = B/(b*d) must be an integer)");
  EXPECT_EQ(error([](Plan& p) { p.global_batch = 24; }),
            "invalid plan: schedule interleaved needs micro-batches m = 6 to be a multiple of pp 4");
  EXPECT_EQ(error([](Plan& p) { p.pp = 1; }),
            "invalid plan: schedule interleaved needs pp >= 2 and virtual_stages >= 2 (pp 1, virtual_stages 2)");
  EXPECT_EQ(error([](Plan& p) { p.schedule = Schedule::k1F1B; }),
            "invalid plan: virtual_stages 2 needs schedule interleaved, not 1f1b");
  EXPECT_EQ(error([](Plan& p) { p.tp = 1; }), "invalid plan: sequence_parallel needs tp > 1");
  EXPECT_EQ(error([](Plan& p) { p.zero = 2; }), "ok");  // ZeRO-2/3 pipeline, as torchtitan runs FSDP with PP
  EXPECT_EQ(error([](Plan& p) { p.zero = 0; p.offload = true; }), "invalid plan: offload needs zero >= 1");
  EXPECT_EQ(error([](Plan& p) { p.seq_len = 8192; }),
            "invalid plan: seq_len 8192 exceeds the model's max_position_embeddings 4096");
  EXPECT_EQ(error([](Plan& p) { p.seq_len = 4092; }),
            "invalid plan: sequence_parallel splits seq_len 4092 over tp 8: it must divide");
  EXPECT_EQ(error([](Plan& p) { p.micro_batch = 1; p.global_batch = 200008 * 2; p.schedule = Schedule::k1F1B; p.virtual_stages = 1; }),
            "invalid plan: micro-batches m = 200008 exceed 100000 (raise micro_batch or lower global_batch)");
  // TP must stay inside a node unless allowed.
  const ModelSpec gpt = load("gpt-1t");  // 160 heads
  Plan p = base();
  p.tp = 16;
  p.seq_len = 2048;
  EXPECT_EQ(check_plan(p, gpt, 8).error(),
            "invalid plan: tp 16 does not fit in a node of 8 GPUs (set tp_across_nodes to allow)");
  p.tp_across_nodes = true;
  EXPECT_TRUE(check_plan(p, gpt, 8).ok());
}

TEST(Plan, JsonErrorsNameTheKey) {
  auto error = [](nlohmann::json edit) {
    nlohmann::json j = plan_to_json(base());
    for (auto& [k, v] : edit.items()) {
      if (v.is_null()) j.erase(k); else j[k] = v;
    }
    Result<Plan> p = plan_from_json(j, "p.json");
    return p.ok() ? std::string("ok") : p.error();
  };
  EXPECT_EQ(error({{"schedule", "pipedream"}}),
            "p.json: key 'schedule': unknown value 'pipedream' (expected gpipe|1f1b|interleaved|zb-h1)");
  EXPECT_EQ(error({{"recompute", "some"}}),
            "p.json: key 'recompute': unknown value 'some' (expected none|selective|full)");
  EXPECT_EQ(error({{"tp", nullptr}}), "p.json: key 'tp': missing required key");
  EXPECT_EQ(error({{"dp", 0}}), "p.json: key 'dp': must be >= 1, got 0");
  EXPECT_EQ(error({{"zero", 4}}), "p.json: key 'zero': must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(error({{"micro_batch", "2"}}), "p.json: key 'micro_batch': expected an integer, got \"2\"");
  EXPECT_EQ(error({{"precision", "int8"}}),
            "p.json: key 'precision': unknown value 'int8' (expected fp32|bf16|fp16|fp8)");
  EXPECT_EQ(error({{"zero", 4294967296}}), "p.json: key 'zero': must be 0, 1, 2 or 3, got 4294967296");
  EXPECT_EQ(error({{"execution", {{"dp_bucket_mib", 1e300}}}}), "p.json: execution: key 'dp_bucket_mib': must be <= 1e6");
  EXPECT_EQ(error({{"execution", {{"attention", "paged"}}}}),
            "p.json: execution: key 'attention': unknown value 'paged' (expected flash|materialized)");
  EXPECT_EQ(error({{"execution", {{"fp32_gradients", "yes"}}}}),
            "p.json: execution: key 'fp32_gradients': expected true or false, got \"yes\"");
  EXPECT_EQ(error({{"execution", {{"moe_dispatcher", "nccl"}}}}),
            "p.json: execution: key 'moe_dispatcher': unknown value 'nccl' (expected alltoall|deepep)");
  EXPECT_EQ(error({{"execution", {{"recompute_fraction", 1.5}}}}),
            "p.json: execution: key 'recompute_fraction': is a share of the layers and must be <= 1");
  EXPECT_EQ(error({{"recompute", "selective"}, {"execution", {{"recompute_fraction", 0.5}}}}),
            "p.json: execution: key 'recompute_fraction': applies to recompute full, not selective");
}

}  // namespace
}  // namespace parallax
