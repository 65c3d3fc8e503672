// The DeepSpeed exporter: a plan as a DeepSpeed config plus the notes on what the model code must
// do. Sources: deepspeedai/DeepSpeed@edaa7221 (2026-08) deepspeed/__init__.py (initialize),
// deepspeed/runtime/engine.py, deepspeed/runtime/pipe/{engine,topology}.py, deepspeed/runtime/config.py.
// program/framework.cc's deepspeed_refusal() keeps the planner's --framework deepspeed search to
// the plans deepspeed_config() accepts; tests/planner/export_rules_test.cc checks that they agree.
#include "planner/export.h"

#include "program/model_state.h"

namespace parallax {

namespace {

// Why DeepSpeed cannot run `p` as priced, or "".
std::string deepspeed_cannot(const Plan& p) {
  if (p.pp > 1 && p.schedule != Schedule::k1F1B)
    return std::string("DeepSpeed pipelines run 1f1b only, not ") + schedule_name(p.schedule);
  if (p.ep > 1 && p.tp > 1)  // AutoEP takes no TP mpu and expert TP 1 only
    return "DeepSpeed's AutoEP runs expert parallelism without TP (tp 1), not tp " + std::to_string(p.tp);
  if (p.ep > 1 && p.zero == 3)  // its MoE runs with ZeRO 0-2 (docs/_tutorials/mixture-of-experts.md)
    return "DeepSpeed runs expert parallelism with ZeRO 0-2, not zero 3";
  if (p.pp > 1 && p.zero >= 2)  // PipelineEngine asserts it (deepspeed/runtime/pipe/engine.py)
    return "DeepSpeed pipelines run ZeRO 0 or 1, not zero " + std::to_string(p.zero);
  if (p.sequence_parallel) return "Megatron-style sequence parallelism has no DeepSpeed setting";
  if (p.hybrid_sharding() && p.zero != 3) return "hybrid sharding (dp_shard) exists in DeepSpeed only for ZeRO-3 (MiCS)";
  if (p.uneven())
    return "first_stage_layers/last_stage_layers/pipeline_layout have no DeepSpeed config key (its PipelineModule partition_method is "
           "set in the model code)";
  if (p.recompute == Recompute::kSelective) return "selective recompute has no DeepSpeed setting (use none or full)";
  if (p.execution.recompute_fraction < 1) return "recompute_fraction has no DeepSpeed config key (the model code picks the layers)";
  if (p.cp > 1 && p.execution.cp_comm != CpComm::kAllToAll)
    return "DeepSpeed's context parallelism is Ulysses (cp_comm a2a), not a K/V ring or all-gather";
  // Ulysses needs its own mpu (UlyssesSPAttentionHF.register_with_transformers returns it); AutoTP
  // replaces the engine's mpu with a data x tensor mesh over the whole world
  // (engine.py _configure_tensor_parallel_states, utils/groups.py _init_tp_mesh_device), and a
  // pipeline takes none (__init__.py: "mpu must be None with pipeline parallelism") while its
  // topology (pipe, data, model) has no sequence axis.
  if (p.cp > 1 && p.tp > 1) return "DeepSpeed's Ulysses and AutoTP each need their own mpu (cp > 1 with tp 1 only)";
  if (p.cp > 1 && p.pp > 1) return "DeepSpeed pipelines take no mpu and their topology has no Ulysses axis (cp > 1 with pp 1 only)";
  // engine.py _do_optimizer_sanity_check: without ZeRO, bf16/fp16 gradients accumulate in the
  // model's dtype (DDP_BF16 / FP16, or BF16_Optimizer with grad_acc_dtype bf16 under a pipeline);
  // grad_accum_dtype fp32 there raises "unsupported mix of model_dtype and grad_accum_dtype".
  if (p.zero == 0 && p.execution.fp32_gradients && p.precision != Precision::kFp32)
    return "DeepSpeed without ZeRO accumulates bf16/fp16 gradients in their own dtype, not fp32 as priced (fp32 gradients need zero >= 1)";
  if (p.precision == Precision::kFp8)
    return "DeepSpeed's config has no FP8 training setting (Transformer Engine is set up in the model code)";
  return "";
}

}  // namespace

std::vector<std::string> deepspeed_notes(const Plan& p) {
  std::vector<std::string> notes;
  const std::string dp = std::to_string(p.dp), pp = std::to_string(p.pp), tp = std::to_string(p.tp);
  // deepspeed.initialize asserts mpu is None for a PipelineModule and takes the groups from its
  // topology; PipeModelDataParallelTopology(num_pp, num_mp, num_dp) orders ranks pipe, data, model.
  if (p.pp > 1 && p.tp > 1)
    notes.push_back("build the model as PipelineModule(layers, topology=PipeModelDataParallelTopology(num_pp=" + pp +
                    ", num_mp=" + tp + ", num_dp=" + dp + "), partition_method=\"parameters\") from tensor-parallel "
                    "layers (Megatron-DeepSpeed's, taking their groups from that topology) and pass no mpu; AutoTP is "
                    "left out of the config because it would replace the pipeline's groups");
  else if (p.pp > 1)
    notes.push_back("build the model as PipelineModule(layers, num_stages=" + pp +
                    ", partition_method=\"parameters\") and pass no mpu; DeepSpeed takes the stage count from the code, "
                    "not the config");
  if (p.tp > 1 && p.pp == 1)
    notes.push_back("pass the tensor-parallel groups (mpu=...) to deepspeed.initialize, or DeepSpeed counts the " + tp +
                    " TP ranks as data-parallel in its train_batch_size check");
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

namespace {

nlohmann::json zero_section(const Plan& p) {
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
  return zero;
}

}  // namespace

Result<nlohmann::json> deepspeed_config(const Plan& p) {
  if (std::string why = deepspeed_cannot(p); !why.empty()) return Error{"--emit deepspeed: " + why};
  nlohmann::json j;
  j["train_batch_size"] = p.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch;
  j["gradient_accumulation_steps"] = p.micro_batches();
  j["gradient_clipping"] = 1.0;
  if (p.precision == Precision::kBf16) j["bf16"] = {{"enabled", true}};
  if (p.precision == Precision::kFp16)
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16},
                 {"loss_scale_window", 1000}, {"hysteresis", 2}, {"min_loss_scale", 1}};
  // fp32 gradients (ZeRO >= 1 only, deepspeed_cannot): bf16 with ZeRO-1 then runs BF16_Optimizer
  // with fp32 accumulation, ZeRO-2/3 accumulate in gradient_accumulation_dtype.
  if (p.execution.fp32_gradients && p.precision != Precision::kFp32) {
    j["data_types"] = {{"grad_accum_dtype", "fp32"}};
    j["communication_data_type"] = "fp32";
  }
  // The optimizer Parallax prices (Adam with fp32 states); offload needs it named to build
  // DeepSpeedCPUAdam. The learning rate and betas are the user's to set.
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}}}};
  j["zero_optimization"] = zero_section(p);
  // AutoTP only without a pipeline: with one, TP comes from the PipelineModule topology
  // (deepspeed_notes), and AutoTP would overwrite the pipeline's groups (engine.py sets
  // self.mpu = groups in _configure_tensor_parallel_states).
  if (p.tp > 1 && p.pp == 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  if (p.ep > 1) j["expert_parallel"] = {{"enabled", true}, {"autoep_size", p.ep}};
  if (p.cp > 1) j["sequence_parallel_size"] = p.cp;
  // The stage count and partition are PipelineModule arguments (num_stages or topology,
  // partition_method), not config keys DeepSpeed reads; deepspeed_notes() says so.
  if (p.pp > 1) j["pipeline"] = {{"activation_checkpoint_interval", p.recompute == Recompute::kFull ? 1 : 0}};
  if (p.recompute == Recompute::kFull)
    j["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false}};
  return j;
}

}  // namespace parallax
