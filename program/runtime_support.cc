#include "program/runtime_support.h"

#include <string>

#include "program/pipeline_exchange.h"
#include "program/step_program.h"

namespace parallax {

namespace {
// The first model feature the transformer of runtime/ does not have (it is GPT-2's or Llama's
// layer: two affine norms, no q/k norms, a sequential block, SwiGLU or tanh-GELU or squared ReLU),
// or "".
std::string model_gap(const ModelSpec& m) {
  auto of = [&](const std::string& what) { return what + " (" + m.model_type + ")"; };
  if (m.norms_per_layer != 2) return of(std::to_string(m.norms_per_layer) + " norms per layer");
  if (!m.norm_affine) return of("non-parametric norms");
  if (m.norm == Norm::kLayerNorm && !m.norm_bias) return of("LayerNorm without a bias");
  if (m.qk_norm_params > 0) return of("q/k norms");
  if (m.parallel_block) return of("parallel attention and MLP blocks");
  if (m.lm_head_bias) return of("an output-layer bias");
  if (m.mtp_layers > 0) return of("multi-token prediction (num_nextn_predict_layers " + std::to_string(m.mtp_layers) + ")");
  if (m.is_moe() && m.has_mlp_bias()) return of("biases on the experts' linears");
  if (m.mlp == Mlp::kSwiGlu && m.hidden_act != "silu") return of("a gated MLP with " + m.hidden_act);
  if (m.mlp == Mlp::kGelu && m.hidden_act != "gelu_new" && m.hidden_act != "gelu_pytorch_tanh")
    return of("the " + m.hidden_act + " activation (it runs GELU's tanh form)");
  return "";
}

// The runtimes' selective recompute re-runs the attention core and nothing else.
std::string selective_gap(const Plan& p) {
  if (p.recompute != Recompute::kSelective) return "";
  if (p.execution.selective != SelectiveRecompute::kAttentionCore)
    return std::string("selective recompute '") + selective_name(p.execution.selective) + "' (it re-runs the attention core)";
  if (p.execution.recompute_modules != kCoreAttn) return "recompute_modules other than core_attn (it re-runs the attention core)";
  return "";
}

}  // namespace

Status check_runtime_support(const ModelSpec& m, const Plan& p) {
  auto no = [](const std::string& what) { return Error{"the CPU runtime does not execute " + what + " yet"}; };
  if (std::string gap = model_gap(m); !gap.empty()) return no(gap);
  if (m.is_moe()) {  // Mixtral's MoE: a router, top-k, SwiGLU experts, dropless
    if (m.shared_ffn_hidden > 0 || m.dense_layers > 0 || m.is_mla() || m.router_bias)
      return no("shared experts, leading dense layers or latent attention (" + m.name + "; Mixtral-style MoE runs)");
    // Its transformer puts the same MoE MLP in every layer (runtime/): a dense MLP every k-th layer
    // (decoder_sparse_step, interleave_moe_layer_step, mlp_only_layers) is a second layer kind.
    if (m.has_dense_layers())
      return no("dense layers among MoE ones (" + m.name + ": " + std::to_string(m.dense_layer_count()) + " of " +
                std::to_string(m.layers) + " layers dense; every layer MoE runs)");
    if (p.expert_tp() != p.tp) return no("expert TP other than TP (etp " + std::to_string(p.etp) + ")");
    if (p.execution.moe_capacity_factor > 0) return no("an expert capacity factor (its MoE layers are dropless)");
    if (p.precision == Precision::kFp8) return no("FP8 in mixture-of-experts layers");
  }
  if (p.cp > 1 && p.execution.cp_comm == CpComm::kAllToAll)
    return no("context parallelism with cp_comm a2a (it runs the p2p ring and all-gather)");
  if (p.cp > 1 && m.positions != Positions::kRotary) return no("context parallelism with learned positions");
  if (p.precision == Precision::kFp8 && p.execution.fp8_recipe != Fp8Recipe::kCurrent)
    return no(std::string("precision fp8 with ") + fp8_recipe_name(p.execution.fp8_recipe) +
              " scaling (it emulates current scaling: fp8_recipe current)");
  // MPI guarantees tags up to 32767; pipeline transfers use one per (direction, micro-batch, stage).
  if (p.pp > 1 && 2 * p.micro_batches() * p.pp * p.virtual_stages > 32767)
    return Error{"too many micro-batches x stages for MPI tags (at most 32767 transfers per step)"};
  if (p.offload) return no("offload");
  if (std::string gap = selective_gap(p); !gap.empty()) return no(gap);
  if (p.hybrid_sharding()) return no("hybrid sharding (dp_shard " + std::to_string(p.dp_shard) + " < dp)");
  if (p.execution.overlap_param_gather) return no("execution.overlap_param_gather (it gathers weights after the optimizer)");
  if (p.execution.tp_comm_overlap && p.tp > 1) return no("execution.tp_comm_overlap (its TP collectives run after their GEMMs)");
  if (p.execution.moe_a2a_overlap && p.ep > 1)
    return no("execution.moe_a2a_overlap (its expert all-to-alls run inside their own pass)");
  return Status::Ok();
}

Status check_gpu_support(const ModelSpec& m, const Plan& p, bool emulated) {
  auto no = [](const std::string& what) { return Error{"the GPU runtime does not execute " + what + " yet"}; };
  if (p.offload) return no("offload");
  if (p.zero > 1) return no("ZeRO-" + std::to_string(p.zero) + " (only 0 and 1; the CPU runtime executes 2 and 3)");
  if (p.virtual_stages > 1) return no("interleaved schedules (one model chunk per stage)");
  if (!p.pipeline_layout.empty()) return no("pipeline_layout (first/last_stage_layers run)");
  if (p.execution.recompute_fraction < 1) return no("execution.recompute_fraction (it recomputes every layer or none)");
  if (m.is_moe()) return no("mixture-of-experts models (expert parallelism is not built)");
  if (p.cp > 1) return no("context parallelism (cp " + std::to_string(p.cp) + "; the CPU runtime executes it)");
  if (p.precision == Precision::kFp8) return no("precision fp8 (no FP8 GEMMs are built)");
  if (std::string gap = model_gap(m); !gap.empty()) return no(gap);
  if (std::string gap = selective_gap(p); !gap.empty()) return no(gap);
  if (p.hybrid_sharding()) return no("hybrid sharding (dp_shard " + std::to_string(p.dp_shard) + " < dp)");
  if (p.execution.overlap_param_gather) return no("execution.overlap_param_gather (it gathers weights after the optimizer)");
  if (p.execution.tp_comm_overlap && p.tp > 1) return no("execution.tp_comm_overlap (its TP collectives run after their GEMMs)");
  if (m.mlp == Mlp::kSquaredRelu || (m.positions == Positions::kRotary && m.rotary_dims != m.head_dim))
    return no(m.model_type + " models (squared-ReLU MLP and partial rotary run on the CPU runtime only)");
  if (!emulated && p.pp > 1)
    if (Status s = check_exchanges(build_step_program(m, p)); !s.ok())
      return Error{"the GPU runtime refuses " + s.error() + ": its blocking send/receive pairs could deadlock (--emulate-rank runs it)"};
  return Status::Ok();
}

}  // namespace parallax
