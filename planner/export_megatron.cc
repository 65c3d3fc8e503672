// The Megatron-LM exporter: a plan and its model as Megatron-LM command-line arguments, each as
// NVIDIA/Megatron-LM@d98e8a64 (2026-08) spells and types it: megatron/training/arguments.py
// (add_argument calls, and TransformerConfig's fields turned into flags by
// megatron/training/argument_utils.py ArgumentGroupFactory), validate_args, and
// megatron/core/transformer/transformer_config.py __post_init__. tests/data/megatron-flags.json
// lists those flags and tests/planner/export_rules_test.cc checks every export against them.
#include "planner/export.h"

#include "program/framework.h"
#include "program/pipeline_layout.h"

#include <cmath>
#include <sstream>

namespace parallax {

namespace {

struct Args {
  std::vector<std::string>& a;
  template <typename T>
  void operator()(const std::string& flag, const T& value) {
    std::ostringstream s;
    s << flag << " " << value;
    a.push_back(s.str());
  }
  void flag(const std::string& name) { a.push_back(name); }
};

// Biases on every linear: Megatron's default (its --disable-bias-linear is written otherwise).
bool all_linear_biases(const ModelSpec& m) { return m.has_qkv_bias() && m.has_o_bias() && m.has_mlp_bias(); }

// The model's shape as Megatron-LM arguments.
void shape_arguments(const ModelSpec& m, Args& arg) {
  arg("--max-position-embeddings", m.max_positions);
  arg("--num-layers", m.layers);
  arg("--hidden-size", m.hidden);
  // An MoE model's dense FFN (its dense layers' width) and its experts' own width.
  arg("--ffn-hidden-size", m.has_dense_layers() ? m.dense_ffn_hidden : m.ffn_hidden);
  arg("--num-attention-heads", m.heads);
  // Megatron pads it to a multiple of 128 x TP; a real tokenizer's own size takes precedence.
  arg("--vocab-size", m.vocab);
  if (m.head_dim * m.heads != m.hidden && !m.is_mla()) arg("--kv-channels", m.head_dim);
  if (m.kv_heads != m.heads) {
    arg.flag("--group-query-attention");
    arg("--num-query-groups", m.kv_heads);
  }
  if (m.is_mla()) {
    arg.flag("--multi-latent-attention");
    if (m.q_lora_rank > 0) arg("--q-lora-rank", m.q_lora_rank);
    arg("--kv-lora-rank", m.kv_lora_rank);  // stated: the command line's default (32) is not the model's
    arg("--qk-head-dim", m.head_dim - m.qk_rope_dim);
    arg("--qk-pos-emb-head-dim", m.qk_rope_dim);
    arg("--v-head-dim", m.v_head_dim);
  }
  // DeepSeek-V3's multi-token-prediction depth, priced on the last stage as Megatron-Core builds it.
  if (m.mtp_layers > 0) arg("--mtp-num-layers", m.mtp_layers);
}

// Which layers are MoE (1) and dense (0), as the Python list expression --moe-layer-freq takes
// (arguments.py moe_freq_type: "([0]*3+[1]*58)"). Its integer form N is no use: it makes layers
// 0, N, 2N, ... MoE, where Qwen's decoder_sparse_step and Llama 4's interleave step make layers
// N-1, 2N-1, ... MoE. Runs of equal entries become [v]*n; a repeated pair of runs becomes
// ([0]*a+[1]*b)*r (Llama 4 Maverick's 48 layers: ([0]*1+[1]*1)*24).
std::string moe_layer_pattern(const ModelSpec& m) {
  std::vector<std::pair<int, int64_t>> runs;  // (1 for MoE, length)
  for (int64_t i = 0; i < m.layers; ++i) {
    const int v = m.is_dense_layer(i) ? 0 : 1;
    if (!runs.empty() && runs.back().first == v) ++runs.back().second;
    else runs.push_back({v, 1});
  }
  auto run = [](const std::pair<int, int64_t>& r) { return std::string("[") + std::to_string(r.first) + "]*" + std::to_string(r.second); };
  std::string out;
  for (size_t i = 0; i < runs.size();) {
    size_t reps = 1;
    while (i + 2 * reps + 1 < runs.size() && runs[i + 2 * reps] == runs[i] && runs[i + 2 * reps + 1] == runs[i + 1]) ++reps;
    out += out.empty() ? "" : "+";
    if (reps > 1) {
      out += std::string("(") + run(runs[i]) + "+" + run(runs[i + 1]) + ")*" + std::to_string(reps);
      i += 2 * reps;
    } else {
      out += run(runs[i]);
      ++i;
    }
  }
  return out;
}

// The experts and their router, as the config states them (ModelSpec::Recipe).
void moe_arguments(const ModelSpec& m, const Plan& p, Args& arg) {
  const ModelSpec::Recipe& r = m.recipe;
  arg("--num-experts", m.experts);
  arg("--moe-router-topk", m.experts_per_token);
  arg("--moe-ffn-hidden-size", m.ffn_hidden);
  if (m.shared_ffn_hidden > 0) arg("--moe-shared-expert-intermediate-size", m.shared_ffn_hidden);
  if (m.shared_expert_gate) arg.flag("--moe-shared-expert-gate");  // Qwen2-MoE's sigmoid gate on it
  // Dense layers among the MoE ones: a Python list Megatron evaluates, one entry per layer;
  // quoted, as a shell would read the parentheses and expand the asterisks.
  if (m.has_dense_layers()) arg("--moe-layer-freq", "'(" + moe_layer_pattern(m) + ")'");
  if (p.execution.moe_dispatcher == MoeDispatcher::kDeepEp) {  // the dispatcher the plan prices
    arg("--moe-token-dispatcher-type", "flex");
    arg.flag("--moe-enable-deepep");
  } else {
    arg("--moe-token-dispatcher-type", "alltoall");
  }
  arg.flag("--moe-grouped-gemm");                  // the experts as one grouped GEMM, as priced
  if (p.execution.moe_a2a_overlap && p.ep > 1) arg.flag("--overlap-moe-expert-parallel-comm");
  // Softmax: Megatron's default (softmax of the top-k logits) is Hugging Face's norm_topk_prob;
  // without it the softmax runs over all experts before the top-k (Qwen-MoE, DeepSeek-V2).
  if (r.router_score == "sigmoid") arg("--moe-router-score-function", "sigmoid");
  else if (!r.router_norm_topk) arg.flag("--moe-router-pre-softmax");
  if (r.router_scaling != 1.0) arg("--moe-router-topk-scaling-factor", r.router_scaling);
  // Group-limited routing. Megatron scores a group by its top (topk / group_topk) scores, as
  // DeepSeek-V3's noaux_tc does (top 2 of 8 / 4); DeepSeek-V2's group_limited_greedy takes the max.
  if (r.router_groups > 1) {
    arg("--moe-router-num-groups", r.router_groups);
    arg("--moe-router-group-topk", r.router_group_topk);
  }
  // DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias updated by 0.001 per step
  // (DeepSeek-V3 report, Sec. 2.1.2; Megatron's default, stated).
  if (m.router_bias) {
    arg.flag("--moe-router-enable-expert-bias");
    arg("--moe-router-bias-update-rate", 0.001);
  }
  if (r.aux_loss_coef > 0) {
    arg("--moe-router-load-balancing-type", r.seq_aux_loss ? "seq_aux_loss" : "aux_loss");
    arg("--moe-aux-loss-coeff", r.aux_loss_coef);
  } else {
    arg("--moe-router-load-balancing-type", "none");
  }
}

// Positions: rotary (its base, share of each head and scaling) or a learned table.
void rope_arguments(const ModelSpec& m, Args& arg) {
  const ModelSpec::Recipe& r = m.recipe;
  const bool yarn = m.positions == Positions::kRotary && r.rope_scaling == "yarn";
  // Without MLA, YaRN is a position-embedding type of its own (argument_utils.py _apply_yarn_config_from_args).
  arg("--position-embedding-type", m.positions != Positions::kRotary ? "learned_absolute" : yarn && !m.is_mla() ? "yarn" : "rope");
  if (m.positions != Positions::kRotary) return;
  if (m.rotary_dims != m.head_dim && !m.is_mla()) arg("--rotary-percent", static_cast<double>(m.rotary_dims) / static_cast<double>(m.head_dim));
  // Megatron-LM declares --rotary-base an int: 1e6 must print as 1000000, not 1e+06.
  if (m.rope_theta != 10000.0) arg("--rotary-base", std::llround(m.rope_theta));
  if (r.rope_scaling == "llama3") {
    arg.flag("--use-rope-scaling");
    arg("--rope-scaling-factor", r.rope_factor);
  }
  if (r.rope_scaling == "linear") arg("--rotary-seq-len-interpolation-factor", std::llround(r.rope_factor));
  // MLA takes YaRN by default (--rope-type): stated either way.
  if (m.is_mla()) arg("--rope-type", yarn ? "yarn" : "rope");
  if (yarn) {
    arg("--rotary-scaling-factor", r.rope_factor);
    arg("--mscale", r.rope_mscale);
    arg("--mscale-all-dim", r.rope_mscale_all_dim);
    if (!m.is_mla()) {
      arg("--yarn-original-max-position-embeddings", r.rope_original_positions > 0 ? r.rope_original_positions : m.max_positions);
      arg("--yarn-beta-fast", r.rope_beta_fast);
      arg("--yarn-beta-slow", r.rope_beta_slow);
    }
  }
}

// Norms, activation, positions, biases and dropout.
void block_arguments(const ModelSpec& m, Args& arg) {
  if (m.mlp == Mlp::kSwiGlu) arg.flag("--swiglu");
  if (m.mlp == Mlp::kSquaredRelu) arg.flag("--squared-relu");
  if (m.norm == Norm::kRmsNorm) arg("--normalization", "RMSNorm");
  arg("--norm-epsilon", m.norm_eps);  // Megatron's default 1e-5 is not Qwen3's or Llama 2's 1e-6
  if (m.qk_norm_params > 0) arg.flag("--qk-layernorm");  // Qwen3, OLMo 2: priced with them
  if (m.model_type == "nemotron") arg.flag("--apply-layernorm-1p");
  rope_arguments(m, arg);
  if (!m.tied_embeddings) arg.flag("--untie-embeddings-and-output-weights");
  if (!all_linear_biases(m)) arg.flag("--disable-bias-linear");
  if (!all_linear_biases(m) && m.has_qkv_bias()) arg.flag("--add-qkv-bias");
  if (!m.dropout) {
    arg("--attention-dropout", "0.0");
    arg("--hidden-dropout", "0.0");
  }
}

// Parallelism, batch and schedule.
void parallel_arguments(const ModelSpec& m, const Plan& p, Args& arg) {
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
  if (!p.pipeline_layout.empty()) {
    // Megatron infers the virtual pipeline size from the layout's chunks; quoted for the shell.
    std::ostringstream quoted;
    quoted << '\'' << megatron_layout_string(p.pipeline_layout) << '\'';
    arg("--pipeline-model-parallel-layout", quoted.str());
  } else if (p.schedule == Schedule::kInterleaved) {
    arg("--num-layers-per-virtual-pipeline-stage", p.chunk_layers(m.layers, 0).count);
  }
  if (p.first_stage_layers > 0) arg("--decoder-first-pipeline-num-layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) arg("--decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (p.sequence_parallel) arg.flag("--sequence-parallel");
  arg("--micro-batch-size", p.micro_batch);
  arg("--global-batch-size", p.global_batch);
  arg("--seq-length", p.seq_len);
}

// Precision, optimizer, recompute and overlap.
void training_arguments(const ModelSpec& m, const Plan& p, Args& arg) {
  const bool bf16 = p.precision == Precision::kBf16 || p.precision == Precision::kFp8;  // FP8 runs on a bf16 model
  if (bf16) arg.flag("--bf16");
  if (p.precision == Precision::kFp16) arg.flag("--fp16");
  if (p.precision == Precision::kFp8) {
    // E4M3 forward, E5M2 gradients; current scaling is Megatron's tensorwise recipe. Delayed
    // scaling states Transformer Engine's own amax history, not Megatron's default of 1.
    arg("--fp8-format", "hybrid");
    // Megatron's names: tensorwise is current scaling; blockwise and mxfp8 keep theirs.
    arg("--fp8-recipe", p.execution.fp8_recipe == Fp8Recipe::kCurrent ? "tensorwise" : fp8_recipe_name(p.execution.fp8_recipe));
    if (p.execution.fp8_recipe == Fp8Recipe::kDelayed) {
      arg("--fp8-amax-history-len", 1024);
      arg("--fp8-amax-compute-algo", "max");
    }
    if (p.execution.fp8_param_gather) arg.flag("--fp8-param-gather");
  }
  if (p.zero >= 2) {
    // Megatron-FSDP: gradients (ZeRO-2) and weights too (ZeRO-3) sharded, per TransformerLayer.
    // validate_args requires its fsdp_dtensor checkpoints and sets the distributed optimizer.
    arg.flag("--use-megatron-fsdp");
    arg("--data-parallel-sharding-strategy", p.zero == 3 ? "optim_grads_params" : "optim_grads");
    arg("--ckpt-format", "fsdp_dtensor");
  }
  if (p.zero >= 1) arg.flag("--use-distributed-optimizer");
  // Hybrid sharding: the distributed optimizer sharded within each of N instances, all-reduced across.
  if (p.hybrid_sharding()) arg("--num-distributed-optimizer-instances", p.data_ranks() / p.shard_degree());
  if (p.offload) {
    arg.flag("--optimizer-cpu-offload");
    arg.flag("--use-precision-aware-optimizer");  // validate_args requires it with the offload
  }
  if (p.recompute == Recompute::kSelective) {
    arg("--recompute-granularity", "selective");
    if (p.execution.recompute_modules != kCoreAttn) arg("--recompute-modules", recompute_modules_text(p.execution.recompute_modules, " "));
  }
  if (p.recompute == Recompute::kFull && p.execution.recompute_fraction < 1) {
    // block: the first n layers of every chunk recompute, n the priced share of a chunk's layers.
    const int64_t chunk = p.chunk_layers(m.layers, 0).count;
    arg("--recompute-granularity", "full");
    arg("--recompute-method", "block");
    arg("--recompute-num-layers", std::llround(p.execution.recompute_fraction * static_cast<double>(chunk)));
  } else if (p.recompute == Recompute::kFull) {
    arg("--recompute-granularity", "full");
    arg("--recompute-method", "uniform");
    arg("--recompute-num-layers", 1);
  }
  // The attention kernel as priced (--use-flash-attn is a no-op in current Megatron-LM; the backend
  // is chosen by name, megatron/core/transformer/enums.py AttnBackend): cuDNN's is Transformer
  // Engine's FusedAttention, "fused"; FlashAttention-2/3 (and Parallax's own kernel, the nearest)
  // TE's "flash"; materialized scores "unfused".
  if (p.execution.attention == AttentionKernel::kMaterialized) arg("--attention-backend", "unfused");
  else arg("--attention-backend", p.execution.attention_impl == "cudnn" ? "fused" : "flash");
  // The loss as priced: Megatron's fused cross-entropy, also for a plan priced with one fused
  // pass (Parallax's defaults), whose nearest Megatron-LM has: validate_args refuses TE's
  // --cross-entropy-fusion-impl te.
  if (p.execution.loss == LossKernel::kMegatronFused || p.execution.loss == LossKernel::kFused)
    arg.flag("--cross-entropy-loss-fusion");
  if (p.execution.overlap_grad_reduce) arg.flag("--overlap-grad-reduce");
  // ZeRO-3 is priced with each layer's gather prefetched beneath the previous one's compute
  // (Megatron-FSDP's --overlap-param-gather; validate_args wants --overlap-grad-reduce with it).
  if ((p.zero == 3 && p.execution.overlap_grad_reduce) || (p.execution.overlap_param_gather && p.zero >= 1))
    arg.flag("--overlap-param-gather");
  // validate_args: bf16 accumulates and all-reduces in fp32 unless --grad-reduce-in-bf16; state
  // which one was priced, so the run uses the memory and traffic the plan was priced with.
  if (bf16) arg.flag(p.execution.fp32_gradients ? "--accumulate-allreduce-grads-in-fp32" : "--grad-reduce-in-bf16");
  else if (p.execution.fp32_gradients && p.precision == Precision::kFp16) arg.flag("--accumulate-allreduce-grads-in-fp32");
}

}  // namespace

Result<std::string> megatron_arguments(const ModelSpec& m, const Plan& p) {
  // What --framework megatron refuses to list is what this cannot write, one rule set for both.
  if (std::string why = framework_refusal("megatron", p, m); !why.empty()) return Error{"--emit megatron: " + why};
  std::vector<std::string> a;
  Args arg{a};
  parallel_arguments(m, p, arg);
  shape_arguments(m, arg);
  if (m.is_moe()) moe_arguments(m, p, arg);
  block_arguments(m, arg);
  training_arguments(m, p, arg);
  // One line, so that $(planner --emit megatron) word-splits into exactly these arguments.
  std::ostringstream out;
  for (size_t i = 0; i < a.size(); ++i) out << a[i] << (i + 1 < a.size() ? " " : "\n");
  return out.str();
}

}  // namespace parallax
