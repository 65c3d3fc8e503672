#include "planner/export.h"

#include <cmath>
#include <sstream>

namespace parallax {

namespace {
int64_t whole_bytes(double bytes) { return std::isfinite(bytes) && bytes < 9e18 ? std::llround(bytes) : -1; }
}  // namespace

nlohmann::json evaluation_to_json(const ModelSpec& m, const Plan& plan, const StepReport& e) {
  nlohmann::json j = plan_to_json(plan);
  j["gpus"] = plan.gpus();
  j["micro_batches"] = plan.micro_batches();
  j["params_total"] = total_params(m);
  const MemoryBreakdown& mem = e.memory;
  j["memory_bytes"] = {{"weights", whole_bytes(mem.weights)},     {"gradients", whole_bytes(mem.gradients)},
                       {"optimizer", whole_bytes(mem.optimizer)}, {"activations", whole_bytes(mem.activations)},
                       {"buffers", whole_bytes(mem.buffers)},     {"margin", whole_bytes(mem.margin)},
                       {"host", whole_bytes(mem.host)}};
  j["peak_memory_bytes"] = whole_bytes(e.peak_memory_bytes);
  j["fits_in_memory"] = e.fits_in_memory;
  j["fits_in_host_memory"] = e.fits_in_host_memory;
  j["step_time_s"] = e.step_time_s;
  j["time_breakdown_s"] = {{"pipeline", e.pipeline_s},     {"dp_exposed", e.dp_exposed_s},
                           {"optimizer", e.optimizer_s},   {"overhead", e.overhead_s},
                           {"tp_on_critical_path", e.tp_exposed_s}};
  j["tokens_per_s"] = e.tokens_per_s;
  j["mfu"] = e.mfu;
  j["model_tflops_per_gpu"] = e.model_tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = e.hardware_tflops_per_gpu;
  j["bubble_fraction"] = e.bubble_fraction;
  j["comm_bytes_per_gpu"] = {{"tp", whole_bytes(e.comm_bytes_per_gpu.tp)},
                             {"pp", whole_bytes(e.comm_bytes_per_gpu.pp)},
                             {"dp", whole_bytes(e.comm_bytes_per_gpu.dp)},
                             {"cp", whole_bytes(e.comm_bytes_per_gpu.cp)},
                             {"ep", whole_bytes(e.comm_bytes_per_gpu.ep)}};
  j["bytes_per_gpu_by_tier"] = {{"nvlink", whole_bytes(e.tier_bytes_per_gpu.nvlink)},
                                {"network", whole_bytes(e.tier_bytes_per_gpu.network)}};
  return j;
}

namespace {

// The model's shape as Megatron-LM arguments.
void model_arguments(const ModelSpec& m, std::vector<std::string>& a) {
  auto arg = [&](const std::string& flag, auto value) {
    std::ostringstream s;
    s << flag << " " << value;
    a.push_back(s.str());
  };
  arg("--max-position-embeddings", m.max_positions);
  arg("--num-layers", m.layers);
  arg("--hidden-size", m.hidden);
  // An MoE model's dense FFN (its leading dense layers' width) and its experts' own width.
  arg("--ffn-hidden-size", m.dense_layers > 0 ? m.dense_ffn_hidden : m.ffn_hidden);
  arg("--num-attention-heads", m.heads);
  // Megatron pads it to a multiple of 128 x TP; a real tokenizer's own size takes precedence.
  arg("--vocab-size", m.vocab);
  if (m.head_dim * m.heads != m.hidden && !m.is_mla()) arg("--kv-channels", m.head_dim);
  if (m.kv_heads != m.heads) {
    a.push_back("--group-query-attention");
    arg("--num-query-groups", m.kv_heads);
  }
  if (m.is_moe()) {
    arg("--num-experts", m.experts);
    arg("--moe-router-topk", m.experts_per_token);
    arg("--moe-ffn-hidden-size", m.ffn_hidden);
    if (m.shared_ffn_hidden > 0) arg("--moe-shared-expert-intermediate-size", m.shared_ffn_hidden);
    // Leading dense layers: a Python list Megatron evaluates, one entry per layer.
    if (m.dense_layers > 0)
      // Quoted: a shell would read the parentheses and expand the asterisks.
      arg("--moe-layer-freq", "'([0]*" + std::to_string(m.dense_layers) + "+[1]*" + std::to_string(m.layers - m.dense_layers) + ")'");
    arg("--moe-token-dispatcher-type", "alltoall");  // the all-to-all the plan prices
    a.push_back("--moe-grouped-gemm");               // the experts as one grouped GEMM, as priced
  }
  if (m.is_mla()) {
    a.push_back("--multi-latent-attention");
    if (m.q_lora_rank > 0) arg("--q-lora-rank", m.q_lora_rank);
    arg("--kv-lora-rank", m.kv_lora_rank);  // stated: the command line's default (32) is not the model's
    arg("--qk-head-dim", m.head_dim - m.qk_rope_dim);
    arg("--qk-pos-emb-head-dim", m.qk_rope_dim);
    arg("--v-head-dim", m.v_head_dim);
  }
  if (m.mlp == Mlp::kSwiGlu) a.push_back("--swiglu");
  if (m.mlp == Mlp::kSquaredRelu) a.push_back("--squared-relu");
  if (m.norm == Norm::kRmsNorm) arg("--normalization", "RMSNorm");
  arg("--norm-epsilon", m.norm_eps);  // Megatron's default 1e-5 is not Qwen3's or Llama 2's 1e-6
  if (m.qk_norm_params > 0) a.push_back("--qk-layernorm");  // Qwen3, OLMo 2: priced with them
  if (m.model_type == "nemotron") a.push_back("--apply-layernorm-1p");
  arg("--position-embedding-type", m.positions == Positions::kRotary ? "rope" : "learned_absolute");
  if (m.positions == Positions::kRotary) {
    if (m.rotary_dims != m.head_dim && !m.is_mla()) arg("--rotary-percent", static_cast<double>(m.rotary_dims) / static_cast<double>(m.head_dim));
    // Megatron-LM declares --rotary-base an int: 1e6 must print as 1000000, not 1e+06.
    if (m.rope_theta != 10000.0) arg("--rotary-base", std::llround(m.rope_theta));
  }
  if (!m.tied_embeddings) a.push_back("--untie-embeddings-and-output-weights");
  if (!m.linear_bias) a.push_back("--disable-bias-linear");
  if (m.qkv_bias && !m.linear_bias) a.push_back("--add-qkv-bias");
  if (!m.dropout) {
    arg("--attention-dropout", "0.0");
    arg("--hidden-dropout", "0.0");
  }
}

}  // namespace

Result<std::string> megatron_arguments(const ModelSpec& m, const Plan& p) {
  if (m.is_moe() && p.tp > 1 && !p.sequence_parallel)
    return Error{"--emit megatron: Megatron-Core needs --sequence-parallel for MoE with tensor parallelism"};
  if (p.zero >= 2)
    return Error{"--emit megatron: zero " + std::to_string(p.zero) +
                 " has no Megatron-LM equivalent (zero 1 = --use-distributed-optimizer); use --emit deepspeed"};
  // arguments.py: optimizer offload with --fp8-param-gather needs the delayed recipe.
  if (p.offload && p.precision == Precision::kFp8 && p.execution.fp8_param_gather &&
      p.execution.fp8_recipe != Fp8Recipe::kDelayed)
    return Error{"--emit megatron: optimizer offload with fp8_param_gather needs fp8_recipe delayed (Megatron's validate_args)"};
  if (p.schedule == Schedule::kGpipe || p.schedule == Schedule::kZbH1)
    if (p.pp > 1)
      return Error{std::string("--emit megatron: schedule ") + schedule_name(p.schedule) +
                   " is not in Megatron-LM (it runs 1f1b or interleaved)"};
  std::vector<std::string> a;
  auto arg = [&](const std::string& flag, auto value) {
    std::ostringstream s;
    s << flag << " " << value;
    a.push_back(s.str());
  };
  arg("--tensor-model-parallel-size", p.tp);
  arg("--pipeline-model-parallel-size", p.pp);
  if (p.cp > 1) {
    arg("--context-parallel-size", p.cp);
    // Transformer Engine's spellings (Megatron passes the value through).
    arg("--cp-comm-type", p.execution.cp_comm == CpComm::kAllToAll    ? "a2a"
                          : p.execution.cp_comm == CpComm::kAllGather ? "all_gather"
                                                                       : "p2p");
  }
  if (m.is_moe()) {
    arg("--expert-model-parallel-size", p.ep);
    arg("--expert-tensor-parallel-size", p.expert_tp());  // stated: the plan prices this split
    if (p.execution.moe_capacity_factor > 0) arg("--moe-expert-capacity-factor", p.execution.moe_capacity_factor);
  }
  if (p.schedule == Schedule::kInterleaved)
    arg("--num-layers-per-virtual-pipeline-stage", p.chunk_layers(m.layers, 0).count);
  if (p.first_stage_layers > 0) arg("--decoder-first-pipeline-num-layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) arg("--decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (p.sequence_parallel) a.push_back("--sequence-parallel");
  arg("--micro-batch-size", p.micro_batch);
  arg("--global-batch-size", p.global_batch);
  arg("--seq-length", p.seq_len);
  model_arguments(m, a);
  const bool bf16 = p.precision == Precision::kBf16 || p.precision == Precision::kFp8;  // FP8 runs on a bf16 model
  if (bf16) a.push_back("--bf16");
  if (p.precision == Precision::kFp16) a.push_back("--fp16");
  if (p.precision == Precision::kFp8) {
    // E4M3 forward, E5M2 gradients; current scaling is Megatron's tensorwise recipe. Delayed
    // scaling states Transformer Engine's own amax history, not Megatron's default of 1.
    arg("--fp8-format", "hybrid");
    arg("--fp8-recipe", p.execution.fp8_recipe == Fp8Recipe::kCurrent ? "tensorwise" : "delayed");
    if (p.execution.fp8_recipe == Fp8Recipe::kDelayed) {
      arg("--fp8-amax-history-len", 1024);
      arg("--fp8-amax-compute-algo", "max");
    }
    if (p.execution.fp8_param_gather) a.push_back("--fp8-param-gather");
  }
  if (p.zero == 1) a.push_back("--use-distributed-optimizer");
  // Hybrid sharding: Megatron-Core's distributed optimizer sharded within each of N instances and
  // all-reduced across them.
  if (p.hybrid_sharding()) arg("--num-distributed-optimizer-instances", p.data_ranks() / p.shard_degree());
  if (p.offload) {
    a.push_back("--optimizer-cpu-offload");
    a.push_back("--use-precision-aware-optimizer");  // validate_args requires it with the offload
  }
  if (p.recompute == Recompute::kSelective) arg("--recompute-granularity", "selective");
  if (p.recompute == Recompute::kFull) {
    arg("--recompute-granularity", "full");
    arg("--recompute-method", "uniform");
    arg("--recompute-num-layers", 1);
  }
  // --use-flash-attn is a no-op in current Megatron-LM; the backend is chosen by name.
  if (p.execution.attention == AttentionKernel::kFlash) arg("--attention-backend", "flash");
  if (p.execution.overlap_grad_reduce) a.push_back("--overlap-grad-reduce");
  if (p.execution.overlap_param_gather && p.zero == 1) a.push_back("--overlap-param-gather");
  // Megatron-LM accumulates and reduces bf16 gradients in fp32 unless told otherwise: say which
  // one was priced, so the run uses the memory the plan was priced with.
  if (bf16) a.push_back(p.execution.fp32_gradients ? "--accumulate-allreduce-grads-in-fp32" : "--grad-reduce-in-bf16");
  else if (p.execution.fp32_gradients && p.precision == Precision::kFp16)
    a.push_back("--accumulate-allreduce-grads-in-fp32");

  // One line, so that $(planner --emit megatron) word-splits into exactly these arguments.
  std::ostringstream out;
  for (size_t i = 0; i < a.size(); ++i) out << a[i] << (i + 1 < a.size() ? " " : "\n");
  return out.str();
}

std::vector<std::string> deepspeed_notes(const Plan& p) {
  std::vector<std::string> notes;
  if (p.pp > 1)
    notes.push_back("build the model as PipelineModule(num_stages=" + std::to_string(p.pp) +
                    ", partition_method=\"parameters\"); DeepSpeed takes the stage count from the code, not the config");
  if (p.tp > 1)
    notes.push_back("pass the tensor-parallel groups (mpu=...) to deepspeed.initialize, or DeepSpeed counts the " +
                    std::to_string(p.tp) + " TP ranks as data-parallel in its train_batch_size check");
  if (p.recompute == Recompute::kFull && p.pp == 1)
    notes.push_back("DeepSpeed recomputes only the layers the model wraps in deepspeed.checkpointing.checkpoint");
  if (p.ep > 1)
    notes.push_back("expert_parallel (AutoEP) needs DeepSpeed >= 0.19.2 and a Hugging Face MoE model it supports; "
                    "otherwise build the layers as deepspeed.moe.layer.MoE(ep_size=" + std::to_string(p.ep) + ")");
  if (p.cp > 1)
    notes.push_back("sequence_parallel_size only sizes DeepSpeed's mesh: wrap the attention in code "
                    "(UlyssesSPAttentionHF.register_with_transformers) and pass its mpu to deepspeed.initialize");
  return notes;
}

Result<nlohmann::json> deepspeed_config(const Plan& p) {
  if (p.pp > 1 && p.schedule != Schedule::k1F1B)
    return Error{std::string("--emit deepspeed: DeepSpeed pipelines run 1f1b only, not ") + schedule_name(p.schedule)};
  if (p.ep > 1 && p.tp > 1)  // AutoEP takes no TP mpu and expert TP 1 only
    return Error{"--emit deepspeed: DeepSpeed's AutoEP runs expert parallelism without TP (tp 1), not tp " + std::to_string(p.tp)};
  if (p.ep > 1 && p.zero == 3)  // its MoE runs with ZeRO 0-2 (docs/_tutorials/mixture-of-experts.md)
    return Error{"--emit deepspeed: DeepSpeed runs expert parallelism with ZeRO 0-2, not zero 3"};
  if (p.pp > 1 && p.zero >= 2)  // PipelineEngine asserts it (deepspeed/runtime/pipe/engine.py)
    return Error{"--emit deepspeed: DeepSpeed pipelines run ZeRO 0 or 1, not zero " + std::to_string(p.zero)};
  if (p.sequence_parallel)
    return Error{"--emit deepspeed: Megatron-style sequence parallelism has no DeepSpeed setting"};
  if (p.hybrid_sharding() && p.zero != 3)
    return Error{"--emit deepspeed: hybrid sharding (dp_shard) exists in DeepSpeed only for ZeRO-3 (MiCS)"};
  if (p.uneven())
    return Error{"--emit deepspeed: first_stage_layers/last_stage_layers have no DeepSpeed config key (its "
                 "PipelineModule partition_method is set in the model code)"};
  if (p.recompute == Recompute::kSelective)
    return Error{"--emit deepspeed: selective recompute has no DeepSpeed setting (use none or full)"};
  if (p.cp > 1 && p.execution.cp_comm != CpComm::kAllToAll)
    return Error{"--emit deepspeed: DeepSpeed's context parallelism is Ulysses (cp_comm a2a), not a K/V ring or all-gather"};
  if (p.precision == Precision::kFp8)
    return Error{"--emit deepspeed: DeepSpeed's config has no FP8 training setting (Transformer Engine is set up in the model code)"};
  nlohmann::json j;
  j["train_batch_size"] = p.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch;
  j["gradient_accumulation_steps"] = p.micro_batches();
  j["gradient_clipping"] = 1.0;
  if (p.precision == Precision::kBf16) j["bf16"] = {{"enabled", true}};
  if (p.precision == Precision::kFp16)
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16},
                 {"loss_scale_window", 1000}, {"hysteresis", 2}, {"min_loss_scale", 1}};
  if (p.execution.fp32_gradients && p.precision != Precision::kFp32) {
    // Without ZeRO, DeepSpeed's BF16_Optimizer accumulates in fp32 already and refuses an explicit
    // grad_accum_dtype ("unsupported mix of model_dtype and grad_accum_dtype").
    if (p.zero > 0) j["data_types"] = {{"grad_accum_dtype", "fp32"}};
    j["communication_data_type"] = "fp32";
  }
  // The optimizer Parallax prices (Adam with fp32 states); offload needs it named to build
  // DeepSpeedCPUAdam. The learning rate and betas are the user's to set.
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}}}};
  // DeepSpeed counts the bucket in elements, i.e. gradients.
  const double bucket_elements = p.execution.dp_bucket_mib * 1048576 / bytes_per_param(p).gradients;
  nlohmann::json zero = {{"stage", p.zero},
                         {"overlap_comm", p.execution.overlap_grad_reduce},
                         {"reduce_bucket_size", static_cast<int64_t>(bucket_elements)}};
  if (p.hybrid_sharding()) zero["mics_shard_size"] = p.shard_degree();  // MiCS: shard within, replicate across
  if (p.offload) {
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (p.zero == 3) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  j["zero_optimization"] = zero;
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  if (p.ep > 1) j["expert_parallel"] = {{"enabled", true}, {"autoep_size", p.ep}};
  if (p.cp > 1) j["sequence_parallel_size"] = p.cp;
  // The stage count and partition are PipelineModule arguments (num_stages, partition_method),
  // not config keys DeepSpeed reads; deepspeed_notes() says so.
  if (p.pp > 1) j["pipeline"] = {{"activation_checkpoint_interval", p.recompute == Recompute::kFull ? 1 : 0}};
  if (p.recompute == Recompute::kFull)
    j["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false}};
  return j;
}

}  // namespace parallax
