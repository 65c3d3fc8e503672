#include "planner/export.h"
#include "program/framework.h"

#include <gtest/gtest.h>

#include "program/pipeline_layout.h"
#include "test_plans.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }

Plan plan() { return testing_support::interleaved_plan(); }

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

TEST(Megatron, UpstreamSpellings) {
  Result<std::string> args = megatron_arguments(load("llama2-70b"), plan());
  ASSERT_TRUE(args.ok()) << args.error();
  for (const char* piece :
       {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
        "--num-layers-per-virtual-pipeline-stage 10", "--sequence-parallel", "--micro-batch-size 1",
        "--global-batch-size 64", "--seq-length 4096", "--num-layers 80", "--hidden-size 8192",
        "--ffn-hidden-size 28672", "--num-attention-heads 64", "--vocab-size 32000", "--group-query-attention", "--num-query-groups 8",
        "--swiglu", "--normalization RMSNorm", "--position-embedding-type rope",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--bf16", "--use-distributed-optimizer",
        "--recompute-granularity selective"})
    EXPECT_TRUE(has(*args, piece)) << piece << "\n" << *args;
  Plan full = plan();
  full.recompute = Recompute::kFull;
  args = megatron_arguments(load("llama2-70b"), full);
  EXPECT_TRUE(has(*args, "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"));
  // A share of the layers: Megatron's block method, the first n of each chunk's 10 layers.
  full.execution.recompute_fraction = 0.3;
  EXPECT_TRUE(has(*megatron_arguments(load("llama2-70b"), full),
                  "--recompute-granularity full --recompute-method block --recompute-num-layers 3"));
  full.execution.recompute_fraction = 1;
  EXPECT_EQ(std::count(args->begin(), args->end(), '\n'), 1);  // one line: $(...) gives exactly the arguments
  EXPECT_TRUE(has(*args, "--attention-backend flash"));
  EXPECT_TRUE(has(*args, "--grad-reduce-in-bf16"));  // priced with 2-byte gradients
  // The attention kernel as priced: cuDNN (Megatron's profile) is TE's fused backend.
  full.execution.attention_impl = "cudnn";
  EXPECT_TRUE(has(*megatron_arguments(load("llama2-70b"), full), "--attention-backend fused"));
  full.execution.attention = AttentionKernel::kMaterialized;
  EXPECT_TRUE(has(*megatron_arguments(load("llama2-70b"), full), "--attention-backend unfused"));
}

TEST(Megatron, UnevenStages) {
  Plan p = plan();
  p.schedule = Schedule::k1F1B, p.virtual_stages = 1, p.first_stage_layers = 17, p.last_stage_layers = 17;  // 17 + 2 x 23 + 17
  Result<std::string> args = megatron_arguments(load("llama2-70b"), p);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_TRUE(has(*args, "--decoder-first-pipeline-num-layers 17")) << *args;
  EXPECT_TRUE(has(*args, "--decoder-last-pipeline-num-layers 17")) << *args;
  EXPECT_FALSE(deepspeed_config(p).ok());
}

// A layout: Megatron infers the virtual stages from it, so no layers per virtual stage are given.
TEST(Megatron, PipelineLayout) {
  Plan p = plan();
  p.pipeline_layout.assign(static_cast<size_t>(p.pp * p.virtual_stages), 80 / (p.pp * p.virtual_stages));
  p.pipeline_layout.front() -= 1, p.pipeline_layout.back() += 1;
  Result<std::string> args = megatron_arguments(load("llama2-70b"), p);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_TRUE(has(*args, "--pipeline-model-parallel-layout '" + megatron_layout_string(p.pipeline_layout) + "'")) << *args;
  EXPECT_FALSE(has(*args, "--num-layers-per-virtual-pipeline-stage")) << *args;
  EXPECT_FALSE(deepspeed_config(p).ok());
}

// Hybrid sharding: Megatron-Core's distributed-optimizer instances; DeepSpeed's MiCS for ZeRO-3.
TEST(Export, HybridSharding) {
  Plan p = plan();
  p.dp = 8, p.dp_shard = 2, p.global_batch = 64;
  Result<std::string> args = megatron_arguments(load("llama2-70b"), p);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_TRUE(has(*args, "--num-distributed-optimizer-instances 4")) << *args;
  EXPECT_FALSE(deepspeed_config(p).ok());
  p.zero = 3, p.pp = 1, p.schedule = Schedule::k1F1B, p.virtual_stages = 1, p.recompute = Recompute::kFull, p.sequence_parallel = false;
  Result<nlohmann::json> ds = deepspeed_config(p);
  ASSERT_TRUE(ds.ok()) << ds.error();
  EXPECT_EQ((*ds)["zero_optimization"]["mics_shard_size"], 2);
}

// fp32 gradients are stated to each framework: Megatron's flag, DeepSpeed's accumulation and
// communication types; DeepSpeed's bucket counts elements, so 40 MiB holds 40 Mi / 4 of them.
TEST(Export, Fp32Gradients) {
  Plan p = plan();
  const ModelSpec m = load("llama2-70b");
  EXPECT_FALSE(has(*megatron_arguments(m, p), "--accumulate-allreduce-grads-in-fp32"));
  p.execution.fp32_gradients = true;
  EXPECT_TRUE(has(*megatron_arguments(m, p), "--accumulate-allreduce-grads-in-fp32"));
  Plan ds;
  ds.dp = 8;
  ds.zero = 1;
  ds.global_batch = 8;
  EXPECT_EQ((*deepspeed_config(ds))["zero_optimization"]["reduce_bucket_size"], 40 * 1048576 / 2);
  EXPECT_FALSE(deepspeed_config(ds)->contains("data_types"));
  ds.execution.fp32_gradients = true;
  Result<nlohmann::json> j = deepspeed_config(ds);
  ASSERT_TRUE(j.ok()) << j.error();
  EXPECT_EQ((*j)["data_types"]["grad_accum_dtype"], "fp32");
  EXPECT_EQ((*j)["communication_data_type"], "fp32");
  EXPECT_EQ((*j)["zero_optimization"]["reduce_bucket_size"], 40 * 1048576 / 4);
}

// DeepSpeed's PipelineEngine asserts ZeRO stage < 2: a ZeRO-2/3 pipeline (which torchtitan runs)
// has no DeepSpeed config.
TEST(DeepSpeed, RefusesZeroTwoOrThreeWithPipelines) {
  Plan p = plan();
  p.schedule = Schedule::k1F1B, p.virtual_stages = 1, p.sequence_parallel = false, p.zero = 3;
  EXPECT_EQ(deepspeed_config(p).error(), "--emit deepspeed: DeepSpeed pipelines run ZeRO 0 or 1, not zero 3");
  EXPECT_EQ(framework_refusal("deepspeed", p, load("13b")), "deepspeed pipelines run ZeRO 0 or 1, not 3");
  EXPECT_EQ(framework_refusal("torchtitan", p, load("13b")), "torchtitan's tensor parallelism shards the norms' sequence too (sequence_parallel)");
  // AutoEP takes no TP: EP with TP 2 is neither listed nor exported for DeepSpeed.
  Plan ep;
  ep.tp = 2, ep.dp = 4, ep.ep = 4, ep.global_batch = 8, ep.seq_len = 4096;
  EXPECT_EQ(framework_refusal("deepspeed", ep, load("mixtral-8x7b")),
            "deepspeed's AutoEP runs expert parallelism without TP (tp 1), not tp 2");
  EXPECT_EQ(deepspeed_config(ep).error(), "--emit deepspeed: DeepSpeed's AutoEP runs expert parallelism without TP (tp 1), not tp 2");
}

TEST(Megatron, RefusesWhatItCannotExpress) {
  Plan p = plan();
  p.pp = 1;
  p.schedule = Schedule::k1F1B;
  p.virtual_stages = 1;
  p.zero = 3;
  EXPECT_EQ(megatron_arguments(load("13b"), p).error(),
            "--emit megatron: megatron overlaps Megatron-FSDP's gathers and reductions only with overlap_grad_reduce");
  p.execution.overlap_grad_reduce = true;
  // ZeRO-3 is Megatron-FSDP's full sharding, its gathers prefetched as priced.
  const std::string fsdp = megatron_arguments(load("13b"), p).value();
  EXPECT_NE(fsdp.find("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor "
                      "--use-distributed-optimizer"), std::string::npos) << fsdp;
  EXPECT_NE(fsdp.find("--overlap-param-gather"), std::string::npos) << fsdp;
  p.zero = 2;
  EXPECT_NE(megatron_arguments(load("13b"), p).value().find("--data-parallel-sharding-strategy optim_grads "), std::string::npos);
  p.pp = 2;
  EXPECT_EQ(megatron_arguments(load("13b"), p).error(),
            "--emit megatron: megatron runs ZeRO 2 as Megatron-FSDP, without pipeline parallelism (pp 1), not pp 2");
  p = plan();
  p.schedule = Schedule::kZbH1;
  p.virtual_stages = 1;
  EXPECT_FALSE(megatron_arguments(load("13b"), p).ok());
}

TEST(DeepSpeed, Config) {
  Plan p;
  p.dp = 8;
  p.zero = 3;
  p.offload = true;
  p.micro_batch = 2;
  p.global_batch = 64;
  p.seq_len = 4096;
  p.recompute = Recompute::kFull;
  Result<nlohmann::json> j = deepspeed_config(p);
  ASSERT_TRUE(j.ok()) << j.error();
  EXPECT_EQ((*j)["train_batch_size"], 64);
  EXPECT_EQ((*j)["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ((*j)["gradient_accumulation_steps"], 4);
  EXPECT_EQ((*j)["zero_optimization"]["stage"], 3);
  EXPECT_EQ((*j)["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ((*j)["zero_optimization"]["offload_param"]["device"], "cpu");
  EXPECT_EQ((*j)["bf16"]["enabled"], true);
  EXPECT_TRUE(j->contains("activation_checkpointing"));
  EXPECT_EQ((*j)["optimizer"]["type"], "AdamW");  // offload builds DeepSpeedCPUAdam from it
  // The model must call DeepSpeed's checkpointing: said, since the config cannot do it.
  EXPECT_EQ(deepspeed_notes(p).size(), 1u);
  p.recompute = Recompute::kSelective;
  EXPECT_FALSE(deepspeed_config(p).ok());
}

// Without ZeRO, DeepSpeed accumulates bf16 gradients in bf16 (engine.py _do_optimizer_sanity_check:
// DDP_BF16, or BF16_Optimizer under a pipeline) and refuses grad_accum_dtype fp32: a plan priced
// with fp32 gradients is refused, by the exporter and by --framework deepspeed. A pipeline's stage
// count lives in the model code: no pipeline.stages, a note instead.
TEST(DeepSpeed, WhatDeepSpeedReads) {
  Plan p;
  p.dp = 4, p.pp = 2, p.global_batch = 16, p.seq_len = 1024;
  p.execution.fp32_gradients = true;
  EXPECT_EQ(deepspeed_config(p).error(), "--emit deepspeed: DeepSpeed without ZeRO accumulates bf16/fp16 gradients in their own "
                                         "dtype, not fp32 as priced (fp32 gradients need zero >= 1)");
  EXPECT_NE(framework_refusal("deepspeed", p, load("13b")), "");
  p.execution.fp32_gradients = false;
  Result<nlohmann::json> j = deepspeed_config(p);
  ASSERT_TRUE(j.ok()) << j.error();
  EXPECT_FALSE(j->contains("data_types"));
  EXPECT_FALSE((*j)["pipeline"].contains("stages"));
  EXPECT_NE(deepspeed_notes(p)[0].find("PipelineModule(layers, num_stages=2"), std::string::npos);
  p.execution.fp32_gradients = true;
  p.zero = 1, p.pp = 1, p.dp = 8;
  EXPECT_EQ(deepspeed_config(p)->at("data_types")["grad_accum_dtype"], "fp32");
}

// TP x PP: deepspeed.initialize asserts mpu is None with a PipelineModule and takes its groups from
// the module's topology, so the notes ask for PipeModelDataParallelTopology and the config leaves
// AutoTP out (it would replace those groups). Ulysses with AutoTP or a pipeline is refused.
TEST(DeepSpeed, TensorTimesPipelineUsesTheTopology) {
  Plan p;
  p.tp = 4, p.pp = 2, p.dp = 2, p.zero = 1, p.global_batch = 16, p.seq_len = 1024;
  Result<nlohmann::json> j = deepspeed_config(p);
  ASSERT_TRUE(j.ok()) << j.error();
  EXPECT_FALSE(j->contains("tensor_parallel")) << j->dump();
  const std::vector<std::string> notes = deepspeed_notes(p);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("topology=PipeModelDataParallelTopology(num_pp=2, num_mp=4, num_dp=2)"), std::string::npos) << notes[0];
  for (const std::string& n : notes) EXPECT_EQ(n.find("mpu=..."), std::string::npos) << n;
  p.pp = 1, p.dp = 4;
  EXPECT_EQ((*deepspeed_config(p))["tensor_parallel"]["autotp_size"], 4);
  Plan cp;
  cp.tp = 2, cp.cp = 2, cp.dp = 2, cp.global_batch = 8, cp.seq_len = 4096;
  cp.execution.cp_comm = CpComm::kAllToAll;
  EXPECT_FALSE(deepspeed_config(cp).ok());
  EXPECT_NE(framework_refusal("deepspeed", cp, load("13b")), "");
  cp.tp = 1, cp.pp = 2, cp.dp = 2;
  EXPECT_FALSE(deepspeed_config(cp).ok());
  EXPECT_NE(framework_refusal("deepspeed", cp, load("13b")), "");
}

Plan small_plan() {
  Plan p;
  p.tp = 1, p.dp = 8, p.zero = 1, p.global_batch = 64, p.seq_len = 4096;
  return p;
}

// DeepSeek-V3's router as its config states it: sigmoid scores, the aux-loss-free expert bias,
// routed_scaling_factor 2.5, 8 groups of which 4 are chosen, and one MTP layer.
TEST(Megatron, DeepSeekV3Router) {
  Plan p = small_plan();
  p.ep = 8;
  Result<std::string> args = megatron_arguments(load("deepseek-v3"), p);
  ASSERT_TRUE(args.ok()) << args.error();
  for (const char* piece : {"--moe-router-score-function sigmoid", "--moe-router-enable-expert-bias",
                            "--moe-router-bias-update-rate 0.001", "--moe-router-topk-scaling-factor 2.5",
                            "--moe-router-num-groups 8", "--moe-router-group-topk 4", "--mtp-num-layers 1"})
    EXPECT_TRUE(has(*args, piece)) << piece << "\n" << *args;
  EXPECT_FALSE(has(*args, "--moe-router-pre-softmax"));
}

// Mixtral's balancing loss (router_aux_loss_coef 0.02); Qwen1.5-MoE's softmax over all experts
// before the top-k (norm_topk_prob false) and its gated shared expert.
TEST(Megatron, RouterLossAndSoftmax) {
  Plan p = small_plan();
  p.ep = 8;
  Result<std::string> mixtral = megatron_arguments(load("mixtral-8x7b"), p);
  ASSERT_TRUE(mixtral.ok()) << mixtral.error();
  EXPECT_TRUE(has(*mixtral, "--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0.02")) << *mixtral;
  EXPECT_FALSE(has(*mixtral, "--moe-router-pre-softmax"));
  p.ep = 4;
  Result<std::string> qwen = megatron_arguments(load("qwen1.5-moe-a2.7b"), p);
  ASSERT_TRUE(qwen.ok()) << qwen.error();
  EXPECT_TRUE(has(*qwen, "--moe-router-pre-softmax")) << *qwen;
  EXPECT_TRUE(has(*qwen, "--moe-shared-expert-gate")) << *qwen;
}

// Llama 3.1's rope scaling (factor 8, Megatron's fixed low/high frequency factors).
TEST(Megatron, Llama31RopeScaling) {
  for (const char* name : {"llama3.1-8b", "llama3.1-405b"}) {
    Result<std::string> args = megatron_arguments(load(name), small_plan());
    ASSERT_TRUE(args.ok()) << args.error();
    EXPECT_TRUE(has(*args, "--use-rope-scaling --rope-scaling-factor 8")) << *args;
  }
  EXPECT_FALSE(has(*megatron_arguments(load("llama3-8b"), small_plan()), "--use-rope-scaling"));
}

// Gemma 2's MLP is GeGLU (gelu_pytorch_tanh gated); Megatron's command line gates only SiLU
// (--swiglu) or quick-GELU: refused in one line rather than exported as SwiGLU.
TEST(Megatron, RefusesGatedGelu) {
  const nlohmann::json gemma2 = {
      {"architectures", {"Gemma2ForCausalLM"}}, {"model_type", "gemma2"}, {"hidden_act", "gelu_pytorch_tanh"},
      {"hidden_activation", "gelu_pytorch_tanh"}, {"hidden_size", 2304}, {"intermediate_size", 9216},
      {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
      {"vocab_size", 256000}, {"max_position_embeddings", 8192}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
      {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}, {"sliding_window", 4096},
      {"query_pre_attn_scalar", 256}, {"attention_bias", false}, {"attention_dropout", 0.0}};
  Result<ModelSpec> m = model_from_hf_config(gemma2, "gemma-2-2b");
  ASSERT_TRUE(m.ok()) << m.error();
  Result<std::string> args = megatron_arguments(*m, small_plan());
  ASSERT_FALSE(args.ok()) << *args;
  EXPECT_TRUE(has(args.error(), "GeGLU")) << args.error();
  EXPECT_EQ(args.error().find('\n'), std::string::npos);
  EXPECT_TRUE(deepspeed_config(small_plan()).ok());  // DeepSpeed runs the Hugging Face module as it is
}

// Without --framework the plan is priced with Parallax's defaults (bf16 gradients): the export
// says so, and says fp32 when that was priced.
TEST(Megatron, GradientDtypeAsPriced) {
  Plan p = small_plan();
  EXPECT_TRUE(has(*megatron_arguments(load("llama3-8b"), p), "--grad-reduce-in-bf16"));
  p.execution.fp32_gradients = true;
  EXPECT_TRUE(has(*megatron_arguments(load("llama3-8b"), p), "--accumulate-allreduce-grads-in-fp32"));
}

// The loss as priced: Megatron's fused cross-entropy for megatron-fused (and for Parallax's one
// fused pass, the nearest Megatron-LM runs); its default unfused one for megatron; PyTorch's
// eager loss is not Megatron's and is refused in one line.
TEST(Megatron, LossAsPriced) {
  Plan p = small_plan();
  const ModelSpec m = load("llama3-8b");
  EXPECT_TRUE(has(*megatron_arguments(m, p), "--cross-entropy-loss-fusion"));
  p.execution.loss = LossKernel::kMegatron;
  EXPECT_FALSE(has(*megatron_arguments(m, p), "--cross-entropy-loss-fusion"));
  p.execution.loss = LossKernel::kMegatronFused;
  EXPECT_TRUE(has(*megatron_arguments(m, p), "--cross-entropy-loss-fusion"));
  p.execution.loss = LossKernel::kEagerFp32;
  EXPECT_EQ(megatron_arguments(m, p).error(),
            "--emit megatron: megatron runs its vocab-parallel cross-entropy (loss megatron or megatron-fused), not PyTorch's (loss eager-fp32)");
}

TEST(EvaluationJson, HasTheContractKeys) {
  const ModelSpec m = load("13b");
  Plan p = plan();
  p.pp = 2;
  p.global_batch = 64;
  const StepReport e = estimate_step(m, load_cluster("dgx-h100").value(), p);
  const nlohmann::json j = evaluation_to_json(m, p, e);
  for (const char* key : {"params_total", "memory_bytes", "peak_memory_bytes", "step_time_s", "tokens_per_s", "mfu",
                          "model_tflops_per_gpu", "hardware_tflops_per_gpu", "bubble_fraction", "comm_bytes_per_gpu",
                          "tp", "pp", "dp", "schedule", "fits_in_memory"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"weights", "gradients", "optimizer", "activations", "buffers"})
    EXPECT_TRUE(j["memory_bytes"].contains(key)) << key;
  for (const char* key : {"tp", "pp", "dp"}) EXPECT_TRUE(j["comm_bytes_per_gpu"].contains(key)) << key;
  EXPECT_EQ(j["params_total"], 13015864320);
}

}  // namespace
}  // namespace parallax
