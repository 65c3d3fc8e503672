#include "program/framework.h"

namespace parallax {

namespace {

const char* kMegatronArgs = "NVIDIA/Megatron-LM megatron/training/arguments.py";
const char* kMegatron2022 = "NVIDIA/Megatron-LM@189e72a7 (2022-07)";
const char* kDgxc = "NVIDIA/dgxc-benchmarking@35a9aecc (v24.11.1) nemotron/*.yaml, nemo_megatron/gpt3_175b_hydra.yaml";
const char* kTitan = "pytorch/torchtitan@9dec370";
const char* kFms = "foundation-model-stack/fms-fsdp@5a296af";
const char* kDeepSpeed = "microsoft/DeepSpeed@38327e07";
const char* kTorchEmbedding =
    "PyTorch aten/src/ATen/native/cuda/Embedding.cu: embedding_dense_backward zero-fills a vocab x hidden gradient and scatters the tokens' rows into it";
const char* kMegatronEmbedding =
    "NVIDIA/Megatron-LM megatron/core/tensor_parallel/layers.py: VocabParallelEmbedding indexes its weight (a dense zero-filled gradient in backward); "
    "distributed_data_parallel.py's backward hook adds param.grad into main_grad";

FrameworkProfile megatron() {
  FrameworkProfile p{"megatron", "Megatron-LM with Megatron-Core and Transformer Engine, default arguments", {}, {}};
  Execution& e = p.execution;
  e.fp32_gradients = true;
  e.attention_impl = "cudnn";
  e.megatron_buckets = true;
  e.loss = LossKernel::kMegatron;
  e.dense_embedding_grad = true;
  p.settings = {
      {"attention", "flash", std::string(kMegatronArgs) + ": --attention-backend auto picks TE's fused/flash attention"},
      {"attention_impl", "cudnn", "Transformer Engine prefers its cuDNN FusedAttention backend on Hopper"},
      {"kernels", "fused", "Transformer Engine fused norm+linear; bias-activation and masked-softmax fusion on by default"},
      {"selective", "attention-core", "--recompute-granularity selective re-runs core_attention (Korthikanti et al. 2022)"},
      {"overlap_grad_reduce", "false", std::string(kMegatronArgs) + ": --overlap-grad-reduce is off unless given"},
      {"fp32_gradients", "true", std::string(kMegatronArgs) + ": bf16 without --grad-reduce-in-bf16 accumulates and all-reduces in fp32"},
      {"megatron_buckets", "true", "NVIDIA/Megatron-LM megatron/core/distributed/distributed_data_parallel.py: bucket_size defaults to max(40000000, 1000000 x DP) parameters; pipeline stages after the first take one bucket"},
      {"loss", "megatron", std::string(kMegatronArgs) + ": --cross-entropy-loss-fusion is off unless given; megatron/core/tensor_parallel/cross_entropy.py runs the loss in unfused fp32 ops"},
      {"dense_embedding_grad", "true", kMegatronEmbedding}};
  return p;
}

FrameworkProfile megatron_2022() {
  FrameworkProfile p{"megatron-2022", "Megatron-LM as Korthikanti et al. (2022) ran it: no flash attention, local DDP", {}, {}};
  Execution& e = p.execution;
  e.attention = AttentionKernel::kMaterialized;
  e.fp32_gradients = true;
  e.loss = LossKernel::kMegatron;
  e.dense_embedding_grad = true;
  p.settings = {
      {"attention", "materialized", std::string(kMegatron2022) + " megatron/model/transformer.py: FusedScaleMaskSoftmax over s x s scores"},
      {"kernels", "fused", std::string(kMegatron2022) + " arguments.py: bias-gelu, bias-dropout-add and masked-softmax fusions on by default"},
      {"selective", "attention-core", "Korthikanti et al. 2022, Sec. 5: selective recompute of the attention core"},
      {"overlap_grad_reduce", "false", std::string(kMegatron2022) + " --DDP-impl local: reduce_model_grads after forward_backward (training.py)"},
      {"fp32_gradients", "true", std::string(kMegatron2022) + " distributed.py: main_grad accumulated in fp32"},
      {"loss", "megatron", std::string(kMegatron2022) + " mpu/cross_entropy.py: vocab_parallel_cross_entropy of output.float() in unfused ops"},
      {"dense_embedding_grad", "true", std::string(kMegatron2022) + " mpu/layers.py: VocabParallelEmbedding's F.embedding backward, added into main_grad (distributed.py)"}};
  return p;
}

FrameworkProfile nemo() {
  FrameworkProfile p{"nemo", "NeMo 1.0 megatron_gpt with distributed_fused_adam, as NVIDIA's DGX Cloud recipes run it", {}, {}};
  Execution& e = p.execution;
  e.overlap_grad_reduce = true;
  e.overlap_param_gather = true;
  e.overlap_p2p = true;
  e.tp_comm_overlap = true;
  e.attention_impl = "cudnn";
  e.loss = LossKernel::kMegatron;
  e.dense_embedding_grad = true;
  p.settings = {
      {"attention", "flash", std::string(kDgxc) + ": TE attention (NVTE_FUSED_ATTN cuDNN or flash)"},
      {"attention_impl", "cudnn", std::string(kDgxc) + " nemotron/configure.sh: NVTE_FUSED_ATTN=1 (cuDNN); recipes that set 0 run FlashAttention-2 (attention_impl fa2)"},
      {"kernels", "fused", std::string(kDgxc) + ": bias_activation_fusion, bias_dropout_add_fusion, apply_rope_fusion, masked_softmax_fusion"},
      {"selective", "attention-core", "activations_checkpoint_granularity: selective (core attention)"},
      {"overlap_grad_reduce", "true", std::string(kDgxc) + ": optim.overlap_grad_sync true"},
      {"overlap_param_gather", "true", std::string(kDgxc) + ": optim.overlap_param_sync true"},
      {"overlap_p2p", "true", std::string(kDgxc) + ": overlap_p2p_comm true, batch_p2p_comm false"},
      {"fp32_gradients", "false", std::string(kDgxc) + ": optim.grad_sync_dtype bf16"},
      {"tp_comm_overlap", "true", std::string(kDgxc) + ": ub_tp_comm_overlap true (the calibrated share tp_overlap_exposed stays exposed)"},
      {"loss", "megatron", std::string(kDgxc) + ": cross_entropy_loss_fusion unset, Megatron-Core's TransformerConfig default (false): the unfused vocab-parallel cross-entropy"},
      {"dense_embedding_grad", "true", kMegatronEmbedding}};
  return p;
}

FrameworkProfile fsdp() {
  FrameworkProfile p{"fsdp", "PyTorch FSDP (FULL_SHARD) with a bf16 MixedPrecision policy and eager kernels, as fms-fsdp", {}, {}};
  Execution& e = p.execution;
  e.kernels = KernelFusion::kEager;
  e.attention_impl = "fa2";
  e.loss = LossKernel::kEager;
  e.dense_embedding_grad = true;
  p.settings = {
      {"attention", "flash", std::string(kFms) + " README: SDPA's FlashAttention-2"},
      {"dense_embedding_grad", "true", kTorchEmbedding},
      {"loss", "eager", std::string(kFms) + " fms_fsdp/utils/train_utils.py: nn.CrossEntropyLoss of the bf16 output, uncast"},
      {"attention_impl", "fa2", "PyTorch's SDPA flash backend is FlashAttention-2 (PyTorch 2.2 release notes)"},
      {"kernels", "eager", "PyTorch eager unless torch.compile (--compile)"},
      {"fp32_gradients", "false", std::string(kFms) + " fms_fsdp/policies/mixed_precision.py: param, reduce and buffer dtype bf16"},
      {"overlap_grad_reduce", "false", "FSDP reduce-scatters each unit's gradients as its backward ends (priced by the ZeRO-3 program)"}};
  return p;
}

FrameworkProfile deepspeed() {
  FrameworkProfile p{"deepspeed", "DeepSpeed ZeRO with bf16 around a PyTorch (Hugging Face) model, default config", {}, {}};
  Execution& e = p.execution;
  e.kernels = KernelFusion::kEager;
  e.attention_impl = "fa2";
  e.dp_bucket_mib = 5e8 * 2 / 1048576.0;  // reduce_bucket_size 5e8 bf16 elements
  e.loss = LossKernel::kEagerFp32;
  e.dense_embedding_grad = true;
  p.settings = {
      {"dense_embedding_grad", "true", kTorchEmbedding},
      {"loss", "eager-fp32", "Hugging Face causal LMs: ForCausalLMLoss casts the logits to fp32 for nn.functional.cross_entropy"},
      {"kernels", "eager", std::string(kDeepSpeed) + ": DeepSpeed runs the user's module unfused (Megatron-DeepSpeed brings Megatron's fused kernels)"},
      {"attention_impl", "fa2", "Hugging Face models' SDPA flash backend is FlashAttention-2 (PyTorch 2.2 release notes)"},
      {"dp_bucket_mib", "953.7", std::string(kDeepSpeed) + " deepspeed/runtime/zero/config.py: reduce_bucket_size 5e8 elements"},
      {"overlap_grad_reduce", "false", std::string(kDeepSpeed) + " deepspeed/runtime/zero/config.py: overlap_comm defaults to stage == 3 (ZeRO-3's reduce-scatters are priced per micro-batch by its program)"},
      {"fp32_gradients", "false", std::string(kDeepSpeed) + " deepspeed/runtime/engine.py: with bf16 and ZeRO >= 1 gradients accumulate and reduce in bf16 (stage 0 accumulates in fp32 but communicates in bf16)"}};
  return p;
}

FrameworkProfile torchtitan() {
  FrameworkProfile p{"torchtitan", "torchtitan: FSDP2 per TransformerBlock, eager kernels unless compiled, op-level selective checkpointing", {}, {}};
  Execution& e = p.execution;
  e.kernels = KernelFusion::kEager;
  e.selective = SelectiveRecompute::kOps;
  e.fp32_gradients = true;
  e.attention_impl = "fa2";
  e.gather_copy_out = true;
  e.reduce_copy_in = true;
  e.loss = LossKernel::kEagerFp32;
  e.dense_embedding_grad = true;
  p.settings = {
      {"dense_embedding_grad", "true", kTorchEmbedding},
      {"loss", "eager-fp32", std::string(kTitan) + " train.py (later components/loss.py): cross_entropy of pred.float(), never compiled (\"TODO: compiling loss function causes CUDA errors\"); loss_parallel under TP runs the same ops on DTensors"},
      {"attention", "flash", std::string(kTitan) + " torchtitan/models/llama/model.py: F.scaled_dot_product_attention(is_causal=True)"},
      {"attention_impl", "fa2", "PyTorch's SDPA flash backend is FlashAttention-2 (PyTorch 2.2 release notes)"},
      {"kernels", "eager", std::string(kTitan) + " config_manager.py: training.compile false by default; norms.py RMSNorm in fp32 ops"},
      {"selective", "ops", std::string(kTitan) + " parallelisms/parallelize_llama.py: selective_ac_option 'op' saves mm (except every second), SDPA and reduce_scatter outputs"},
      {"fp32_gradients", "true", std::string(kTitan) + " config_manager.py: mixed_precision_reduce float32 (reduce-scatter in fp32)"},
      {"overlap_grad_reduce", "false", "FSDP2 reduce-scatters each block's gradients as its backward ends (priced by the ZeRO-3 program)"},
      {"tp_comm_overlap", "false", "torchtitan experimental.enable_async_tensor_parallel is off by default (on: tp_comm_overlap true)"},
      {"gather_copy_out", "true", "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_all_gather_copy_out copies the gathered buffer into each parameter (torch.ops.fsdp.split_with_sizes_copy) in wait_for_unshard, on the compute stream"},
      {"reduce_copy_in", "true", "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce copies the block's gradients into the reduce-scatter input at the reduce dtype (torch.ops.fsdp.chunk_cat) on the current stream, before the reduce-scatter stream waits for it"}};
  return p;
}

}  // namespace

namespace {

std::string megatron_refusal(const std::string& name, const Plan& p, const ModelSpec& m) {
  // What the exporter's command line cannot state about the model itself (Gemma's GeGLU, GPT-J's
  // parallel block, ...): no plan of it is one Megatron-LM runs as priced.
  if (std::string why = megatron_model_refusal(m); !why.empty()) return name + " cannot run " + m.name + ": " + why;
  // Megatron-Core asserts sequence parallelism for MoE layers under tensor parallelism.
  if (m.is_moe() && p.tp > 1 && !p.sequence_parallel) return name + " needs sequence_parallel for MoE with tp > 1";
  // Megatron-Core shards gradients and weights too with Megatron-FSDP (--use-megatron-fsdp), whose
  // only schedule path is the one without pipelining (pipeline_parallel/schedules.py special-cases
  // it in forward_backward_no_pipelining alone); NeMo 24.x and the 2022 code predate it.
  if (p.zero >= 2 && name != "megatron") return name + " runs ZeRO 0 or 1 (the distributed optimizer), not " + std::to_string(p.zero);
  if (p.zero >= 2 && p.pp > 1)
    return name + " runs ZeRO " + std::to_string(p.zero) + " as Megatron-FSDP, without pipeline parallelism (pp 1), not pp " +
           std::to_string(p.pp);
  // Megatron-FSDP prefetches its gathers (--overlap-param-gather) and overlaps its reductions only
  // with --overlap-grad-reduce (validate_args asserts the pair), which the pricing assumes.
  if (p.zero >= 2 && !p.execution.overlap_grad_reduce)
    return name + " overlaps Megatron-FSDP's gathers and reductions only with overlap_grad_reduce";
  if (p.pp > 1 && p.schedule != Schedule::k1F1B && p.schedule != Schedule::kInterleaved)
    return name + " pipelines run 1f1b or interleaved, not " + schedule_name(p.schedule);
  // arguments.py: optimizer offload with --fp8-param-gather needs the delayed recipe.
  if (p.offload && p.precision == Precision::kFp8 && p.execution.fp8_param_gather && p.execution.fp8_recipe != Fp8Recipe::kDelayed)
    return name + ": optimizer offload with fp8_param_gather needs fp8_recipe delayed (validate_args)";
  if (p.precision == Precision::kFp8 && p.execution.fp8_recipe == Fp8Recipe::kRowwise)
    return name + " has no fp8_recipe rowwise (--fp8-recipe delayed|tensorwise|mxfp8|blockwise)";
  if (p.execution.loss == LossKernel::kEager || p.execution.loss == LossKernel::kEagerFp32)
    return name + " runs its vocab-parallel cross-entropy (loss megatron or megatron-fused), not PyTorch's (loss " +
           loss_kernel_name(p.execution.loss) + ")";
  if (p.offload && p.zero != 1) return name + " offloads the optimizer only with the distributed optimizer (zero 1)";
  // Megatron-Core's TransformerConfig asserts these for --overlap-moe-expert-parallel-comm.
  if (p.execution.moe_a2a_overlap && p.ep > 1 && p.pp > 1 && p.schedule != Schedule::kInterleaved)
    return name + "'s expert all-to-all overlap needs the interleaved schedule when pp > 1";
  if (p.execution.moe_a2a_overlap && p.ep > 1 && p.recompute == Recompute::kFull)
    return name + "'s expert all-to-all overlap runs without full recompute";
  if (p.recompute == Recompute::kSelective && p.execution.selective != SelectiveRecompute::kAttentionCore)
    return name + "'s selective recompute re-runs Megatron's modules (the attention core by default), not torchtitan's ops";
  if (p.recompute == Recompute::kSelective && p.execution.recompute_modules != kCoreAttn && name == "megatron-2022")
    return name + "'s selective recompute re-runs the attention core only (--recompute-modules came with later Megatron-Core)";
  if (name == "megatron-2022" && (p.zero > 0 || p.offload || p.uneven() || p.hybrid_sharding() || p.cp > 1 || p.ep > 1 ||
                                  p.precision == Precision::kFp8))
    return "megatron-2022 (Korthikanti et al.) has no distributed optimizer, offload, uneven stages, hybrid sharding, "
           "context or expert parallelism, or FP8";
  return "";
}

std::string deepspeed_refusal(const Plan& p) {
  // PipelineEngine asserts ZeRO stage < 2 (deepspeed/runtime/pipe/engine.py).
  if (p.pp > 1 && p.zero >= 2) return "deepspeed pipelines run ZeRO 0 or 1, not " + std::to_string(p.zero);
  // AutoEP builds its own expert groups and takes no TP mpu (expert TP 1 only).
  if (p.ep > 1 && p.tp > 1) return "deepspeed's AutoEP runs expert parallelism without TP (tp 1), not tp " + std::to_string(p.tp);
  // DeepSpeed's MoE runs with ZeRO 0-2 (docs/_tutorials/mixture-of-experts.md: "E + Z").
  if (p.ep > 1 && p.zero == 3) return "deepspeed runs expert parallelism with ZeRO 0-2, not 3";
  if (p.pp > 1 && p.schedule != Schedule::k1F1B) return std::string("deepspeed pipelines run 1f1b only, not ") + schedule_name(p.schedule);
  if (p.sequence_parallel) return "deepspeed has no Megatron-style sequence parallelism";
  if (p.recompute == Recompute::kSelective) return "deepspeed has no selective recompute (none or full)";
  if (p.uneven()) return "deepspeed's pipeline partition is set in the model code, not by first/last stage layers or a layout";
  if (p.hybrid_sharding() && p.zero != 3) return "deepspeed shards hybrid (MiCS) only with ZeRO-3";
  if (p.cp > 1 && p.execution.cp_comm != CpComm::kAllToAll) return "deepspeed's context parallelism is Ulysses (cp_comm a2a)";
  // Ulysses brings its own mpu; AutoTP replaces the engine's with a data x tensor mesh
  // (deepspeed/runtime/engine.py _configure_tensor_parallel_states); a pipeline takes none
  // (deepspeed/__init__.py) and its topology has no sequence axis. As planner/export_deepspeed.cc.
  if (p.cp > 1 && (p.tp > 1 || p.pp > 1)) return "deepspeed's Ulysses (cp > 1) runs without AutoTP or a pipeline (tp and pp 1)";
  // engine.py _do_optimizer_sanity_check: without ZeRO, bf16/fp16 gradients accumulate in their
  // own dtype (DDP_BF16, FP16, BF16_Optimizer under a pipeline), never in fp32.
  if (p.zero == 0 && p.execution.fp32_gradients && p.precision != Precision::kFp32)
    return "deepspeed without ZeRO accumulates bf16/fp16 gradients in their own dtype (fp32 gradients need zero >= 1)";
  if (p.precision == Precision::kFp8) return "deepspeed has no FP8 training setting of its own";
  return "";
}

// PyTorch FSDP (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = 2, NO_SHARD = plain DP) wraps a model it
// neither splits by tensor nor by pipeline.
std::string fsdp_refusal(const Plan& p) {
  if (p.tp > 1 || p.pp > 1) return "fsdp alone has no tensor or pipeline parallelism (tp and pp 1)";
  if (p.zero == 1) return "fsdp shards gradients with the optimizer states (SHARD_GRAD_OP = zero 2), not zero 1";
  if (p.recompute == Recompute::kSelective) return "fsdp checkpoints whole blocks (recompute none or full)";
  if (p.cp > 1 || p.ep > 1) return "fsdp alone has no context or expert parallelism";
  return "";
}

// torchtitan: DDP (zero 0) or FSDP2 (zero 3, HSDP), tensor parallelism with sequence parallelism
// on its norms, PyTorch's pipeline schedules.
std::string torchtitan_refusal(const Plan& p) {
  if (p.zero == 1 || p.zero == 2) return "torchtitan runs DDP (zero 0) or FSDP2 (zero 3), not zero " + std::to_string(p.zero);
  if (p.tp > 1 && !p.sequence_parallel) return "torchtitan's tensor parallelism shards the norms' sequence too (sequence_parallel)";
  if (p.pp > 1 && p.schedule == Schedule::kZbH1) return "torchtitan has no ZB-H1 schedule (gpipe, 1f1b or interleaved)";
  if (p.recompute == Recompute::kSelective && p.execution.recompute_modules != kCoreAttn)
    return "torchtitan has no recompute_modules (they are Megatron's; its selective policy is ops)";
  if (p.offload && p.zero != 3) return "torchtitan offloads only with FSDP2 (zero 3)";
  if (p.cp > 1 && p.execution.cp_comm == CpComm::kAllToAll)
    return "torchtitan's context parallelism rotates K and V (cp_comm p2p or all-gather), not Ulysses";
  return "";
}

}  // namespace

std::string framework_refusal(const std::string& framework, const Plan& p, const ModelSpec& m) {
  if (framework == "megatron" || framework == "nemo" || framework == "megatron-2022") return megatron_refusal(framework, p, m);
  if (!framework.empty() && p.execution.moe_a2a_overlap && p.ep > 1)
    return framework + " does not overlap one micro-batch's expert all-to-alls with another's compute (Megatron-Core does)";
  if (framework == "deepspeed") return deepspeed_refusal(p);
  if (framework == "fsdp") return fsdp_refusal(p);
  if (framework == "torchtitan") return torchtitan_refusal(p);
  return "";
}

std::vector<std::string> framework_names() {
  return {"megatron", "megatron-2022", "nemo", "deepspeed", "fsdp", "torchtitan"};
}

Result<FrameworkProfile> framework_profile(const std::string& name) {
  for (FrameworkProfile (*make)() : {megatron, megatron_2022, nemo, deepspeed, fsdp, torchtitan}) {
    FrameworkProfile p = make();
    if (p.name == name) {
      p.execution.framework = name;
      return p;
    }
  }
  std::string known;
  for (const std::string& n : framework_names()) known += (known.empty() ? "" : ", ") + n;
  return Error{"unknown framework '" + name + "' (known: " + known + ")"};
}

}  // namespace parallax
