// Plan: how a model is split — the third input, beside the model and the cluster. TP x CP x DP x PP
// ranks (TP innermost, then CP, then DP, then PP; expert parallelism regroups the CP x DP ranks of
// MoE layers, as Megatron-Core's expert layout does), ZeRO stage, micro-batch, pipeline schedule, recompute,
// sequence parallelism, precision, offload, and the execution settings a framework chooses (the
// attention kernel, what overlaps what). The runtime executes a Plan as is; keep this file free of
// the search and of the simulator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/layer_cost.h"
#include "models/model_spec.h"
#include "models/status.h"

namespace parallax {

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
// Context parallelism's attention, each with the causal load balancing of 2 cp sequence chunks:
// p2p, a ring passing K and V blocks under the attention compute (Megatron-Core cp_comm_type p2p);
// all-gather, K and V all-gathered before the attention and their gradients reduce-scattered after
// (cp_comm_type all_gather, Llama 3's long-context training); a2a, all-to-alls that trade the
// sequence split for a head split around the attention (Ulysses).
enum class CpComm { kP2p, kAllGather, kAllToAll };
// FP8 scaling: delayed (amax history), current (each tensor's own amax: Megatron's tensorwise),
// rowwise (current scaling with one scale per row of each GEMM operand: torchao's Float8 rowwise,
// cuBLASLt's row-scaled FP8 GEMM), blockwise (DeepSeek-V3's: a scale per 1 x 128 block of
// activations and gradients, per 128 x 128 block of weights; Transformer Engine's
// Float8BlockScaling, Megatron's --fp8-recipe blockwise), mxfp8 (OCP microscaling: a power-of-two
// scale per 32 elements, which Blackwell's tensor cores apply themselves).
enum class Fp8Recipe { kDelayed, kCurrent, kRowwise, kBlockwise, kMxfp8 };
// MoE token dispatch over EP: all-to-all, one copy per routed expert (Megatron's alltoall
// dispatcher); or DeepEP (Megatron's flex dispatcher with --moe-enable-deepep), which sends a token
// once to each other node holding one of its experts and forwards it there over NVLink.
enum class MoeDispatcher { kAllToAll, kDeepEp };
// The loss over the vocabulary-parallel logits, as the framework's code runs it (each moves the
// logits a different number of times; simulator/step_costs.h loss_bytes_per_logit): fused, one
// pass each way (Parallax's runtimes, Transformer Engine's parallel cross-entropy); megatron,
// Megatron's vocab_parallel_cross_entropy in unfused fp32 ops; megatron-fused, the same under
// --cross-entropy-loss-fusion; eager, PyTorch's F.cross_entropy of the logits as they are;
// eager-fp32, of the logits cast to fp32 first.
enum class LossKernel { kFused, kMegatron, kMegatronFused, kEager, kEagerFp32 };

// Dropless MoE routing of a trained router on real text: the Gini coefficient of the experts'
// loads, 0.105 with softmax attention (MHA/GQA) and above 0.24 with latent attention (MLA), on five
// MoE checkpoints at EP 4-32 on H100 (arXiv 2605.20982; ../shared/physics moe_routing_imbalance).
// A normal spread σ has Gini σ / √π, so σ = √π Gini (simulator/step_costs.h busiest_expert).
inline constexpr double kRoutedLoadGini = 0.105, kRoutedLoadGiniLatent = 0.24;

// Software choices that change time or memory but not the math. Defaults follow Megatron-Core.
struct Execution {
  std::string framework;  // the profile these settings came from (framework.h); "" = Parallax's defaults
  AttentionKernel attention = AttentionKernel::kFlash;
  // Which fused kernel (fa2 | fa3 | cudnn) prices flash attention from the cluster's measured
  // curves; "": Parallax's own runtime kernel (the curve "parallax" that `calibrate --device cuda`
  // writes); a kernel the cluster has no curve for: its flash_attention_efficiency.
  std::string attention_impl;
  KernelFusion kernels = KernelFusion::kFused;
  SelectiveRecompute selective = SelectiveRecompute::kAttentionCore;
  // Megatron's --recompute-modules under that policy (RecomputeModule bits; models/layer_cost.h).
  unsigned recompute_modules = kCoreAttn;
  // Full recompute on this share of the layers only, the others keeping their activations:
  // Megatron's --recompute-method block --recompute-num-layers n (n of a chunk's layers),
  // torchtitan's selective_ac_option n (every n-th block: 1/n), fms-fsdp's selective_checkpointing.
  double recompute_fraction = 1.0;
  bool overlap_grad_reduce = false;   // Megatron-Core --overlap-grad-reduce (off by default)
  // ZeRO-1/2: the updated weights' all-gather runs under the next forward (Megatron-Core
  // --overlap-param-gather, NeMo overlap_param_sync), not after the optimizer.
  bool overlap_param_gather = false;
  bool overlap_p2p = false;           // pipeline sends run beside compute (else the sender waits)
  // TP collectives overlapped with the GEMMs they feed (Transformer Engine userbuffers,
  // --tp-comm-overlap; torchtitan's async TP): the calibrated share of their time stays exposed.
  bool tp_comm_overlap = false;
  double dp_bucket_mib = 40.0;        // gradient bucket for DP reduction
  // Megatron-Core DDP's own default instead: with overlap_grad_reduce buckets of max(40M, 1M x DP)
  // parameters on the first pipeline stage; else, and on every later stage, one bucket.
  bool megatron_buckets = false;
  double allocator_margin = 0.05;     // caching-allocator fragmentation, fraction of activations + buffers
  double microbatch_overhead_us = 0;  // fixed cost per micro-batch per stage (launches, data)
  double step_overhead_us = 0;        // fixed cost per step
  // With bf16/fp16: gradients accumulated and DP-reduced in fp32 (4 bytes, not 2), as Megatron-LM's
  // --accumulate-allreduce-grads-in-fp32 (its default for bf16) and Parallax's GPU runtime do.
  bool fp32_gradients = false;
  // The optimizer's main weight copy and Adam m, v in bf16 (6 bytes per parameter, not 12), as
  // NeMo's distributed_fused_adam with optim.dtype bf16 keeps them.
  bool bf16_optimizer_states = false;
  CpComm cp_comm = CpComm::kP2p;
  // MoE routing: the busiest expert's tokens over the mean, per micro-batch and layer (1: balanced,
  // as Megatron's benchmark-only --moe-router-force-load-balancing routes; a router's measured
  // statistics where known; 0: a trained router's, from kRoutedLoadGini), and the
  // capacity factor that caps an expert's tokens at that many times the mean, dropping the rest
  // (0: dropless).
  double moe_imbalance = 0;
  double moe_capacity_factor = 0.0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // The expert all-to-alls of one micro-batch's pass run beside the compute of another's (Megatron's
  // --overlap-moe-expert-parallel-comm, "1F1B A2A overlap"): each forward the schedule runs next to
  // a backward of another micro-batch hides its dispatch and combine behind that backward's
  // compute, and the backward likewise behind the forward's.
  bool moe_a2a_overlap = false;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  LossKernel loss = LossKernel::kFused;
  // ZeRO-3: each gathered unit is copied out of the all-gather's flat buffer into its parameters on
  // the compute stream, before the forward and again before the backward (FSDP2's
  // foreach_all_gather_copy_out); where false, the parameters are views of the buffer (FSDP1's
  // flat parameter, Megatron-FSDP, DeepSpeed).
  bool gather_copy_out = false;
  // ZeRO-2/3: each unit's gradients are copied into the reduce-scatter's flat input, cast to the
  // reduction's width, on the compute stream once its backward ends (FSDP2's foreach_reduce,
  // torch.ops.fsdp.chunk_cat); where false, the gradients already lie in the flat buffer (FSDP1's
  // flat parameter, Megatron's grad buffer).
  bool reduce_copy_in = false;
  // The embedding's backward materializes a dense vocab x hidden gradient each micro-batch
  // (PyTorch's embedding_dense_backward, Megatron's indexing backward: zero-filled, then the
  // tokens' rows scattered in) and adds it into the gradient buffer; where false, the rows are
  // scattered straight into the buffer (Parallax's runtimes).
  bool dense_embedding_grad = false;
  // FP8 weights gathered in FP8 (Megatron --fp8-param-gather, torchtitan's float8 all-gather for
  // FSDP): ZeRO's weight all-gathers move 1 byte per matmul weight, and no 16-bit copy is kept.
  bool fp8_param_gather = false;
};

struct Plan {
  int64_t tp = 1, pp = 1, dp = 1;
  // Context parallelism: cp ranks split every sequence (dp counts batch replicas, so the plan
  // runs on tp x cp x dp x pp GPUs). Expert parallelism: MoE layers split their experts over ep
  // of the cp x dp ranks; the experts' gradients reduce over the other cp x dp / ep.
  int64_t cp = 1, ep = 1;
  // Expert tensor parallelism (Megatron's --expert-tensor-parallel-size): the TP degree of the
  // expert layers, dividing tp; 0 = tp. Below tp, MoE layers regroup the tp x cp x dp ranks of a
  // stage as ETP x EP x expert-DP (Megatron-Core's expert layout).
  int64_t etp = 0;
  int zero = 0;
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  int64_t seq_len = 1;
  Schedule schedule = Schedule::k1F1B;
  int64_t virtual_stages = 1;  // model chunks per pipeline rank (interleaved only)
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  Precision precision = Precision::kBf16;
  bool offload = false;         // optimizer states (and with ZeRO-3 parameters) in host memory
  bool tp_across_nodes = false; // allow a TP group to span nodes
  // Uneven pipeline stages (Megatron's --decoder-first/last-pipeline-num-layers): layers of the
  // first and of the last stage; 0 = an equal share. The other stages split the rest evenly.
  int64_t first_stage_layers = 0, last_stage_layers = 0;
  // An explicit layout (Megatron's --pipeline-model-parallel-layout, torchtitan's split points):
  // the layers of every model chunk, pp x virtual_stages counts in model order (chunk k on
  // pipeline rank k % pp); a chunk may hold none (the embedding or the loss alone). Empty = even
  // chunks, or first/last_stage_layers. See program/pipeline_layout.h.
  std::vector<int64_t> pipeline_layout;
  // Hybrid sharding (HSDP, FSDP's HYBRID_SHARD): ZeRO shards over groups of dp_shard consecutive
  // DP ranks and each shard's gradients are then all-reduced over the dp / dp_shard replicas.
  // 0 = shard over all of DP.
  int64_t dp_shard = 0;
  Execution execution;

  int64_t gpus() const { return tp * cp * dp * pp; }
  // The ranks holding the same dense weights, over which their gradients reduce: cp x dp.
  int64_t data_ranks() const { return cp * dp; }
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  // The ranks of a stage an expert's TP shard can sit on, (tp / etp) x cp x dp, which EP divides;
  // those holding the same experts: that over ep.
  int64_t expert_slots() const { return tp / expert_tp() * cp * dp; }
  int64_t expert_data_ranks() const { return expert_slots() / ep; }
  // The ranks ZeRO shards dense weights over: dp_shard, or all cp x dp.
  int64_t shard_degree() const { return dp_shard > 0 ? dp_shard : cp * dp; }
  bool hybrid_sharding() const { return shard_degree() < cp * dp; }
  // ZeRO shards state only over more than one data rank, or (offload) into host memory; on one
  // data rank without offload, ZeRO 1-3 run as ZeRO 0 (the step program has nothing to reduce).
  bool zero_shards() const { return zero >= 1 && (data_ranks() > 1 || offload); }
  // m = B / (b * d); only meaningful once the plan is valid.
  int64_t micro_batches() const { return global_batch / (micro_batch * dp); }
  bool uneven() const { return first_stage_layers > 0 || last_stage_layers > 0 || !pipeline_layout.empty(); }
  // The layers of `chunk` on pipeline rank `stage`: [first, first + count) of the model's
  // `layers`. Even: layers / (pp x virtual_stages) each, in virtual-stage order. Only meaningful
  // once the plan is valid.
  struct LayerRange {
    int64_t first = 0, count = 0;
  };
  LayerRange chunk_layers(int64_t layers, int64_t stage, int64_t chunk = 0) const;
  // With uneven stages, the layers of each of `stage`'s chunks; empty when even (the runtimes'
  // Transformer::create takes it).
  std::vector<LayerRange> uneven_chunk_layers(int64_t layers, int64_t stage) const;
  // The layers of all of `stage`'s chunks.
  int64_t stage_layers(int64_t layers, int64_t stage) const;
  // The most layers any stage holds (over all its chunks): the pipeline's slowest stage.
  int64_t max_stage_layers(int64_t layers) const;
};

const char* schedule_name(Schedule s);
const char* recompute_name(Recompute r);
const char* precision_name(Precision p);
const char* attention_name(AttentionKernel k);
const char* kernels_name(KernelFusion k);
const char* selective_name(SelectiveRecompute s);
// Megatron's names of the modules set in `modules` (core_attn, layernorm, moe_act, mla_up_proj),
// as a list or joined by `separator`, and the bit of one name.
std::vector<std::string> recompute_module_names(unsigned modules);
std::string recompute_modules_text(unsigned modules, const std::string& separator);
std::optional<unsigned> parse_recompute_module(const std::string& name);
const char* cp_comm_name(CpComm c);
const char* fp8_recipe_name(Fp8Recipe r);
std::optional<Schedule> parse_schedule(const std::string& s);
std::optional<Recompute> parse_recompute(const std::string& s);
std::optional<Precision> parse_precision(const std::string& s);
std::optional<CpComm> parse_cp_comm(const std::string& s);
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& s);
const char* moe_dispatcher_name(MoeDispatcher d);
std::optional<MoeDispatcher> parse_moe_dispatcher(const std::string& s);
const char* loss_kernel_name(LossKernel k);
std::optional<LossKernel> parse_loss_kernel(const std::string& s);
constexpr const char* kLossKernelNames = "fused|megatron|megatron-fused|eager|eager-fp32";  // for errors and help
// execution.attention_impl by name: fa2, fa3, cudnn, or parallax (Parallax's runtime, stored as
// ""); kAttentionImpls lists them for errors and help.
constexpr const char* kAttentionImpls = "fa2|fa3|cudnn|parallax";
std::optional<std::string> parse_attention_impl(const std::string& s);

// Constraints a plan can break. Codes let the search count rejections without building strings.
// The most micro-batches per step a plan may have: the simulator runs every one of them.
constexpr int64_t kMaxMicroBatches = 100000;

enum class Violation {
  kNone,
  kTpHeads,              // attention heads not divisible by TP
  kTpKvHeads,            // KV heads not divisible by TP
  kTpFfn,                // FFN hidden size not divisible by TP
  kTpAcrossNodes,        // TP group larger than a node
  kLayersPp,             // layers not divisible by PP x chunks
  kUnevenStages,         // first/last stage layers that leave the other stages no equal share
  kPipelineLayout,       // a layout without pp x virtual_stages chunks or not summing to the layers
  kHybridSharding,       // dp_shard that does not divide DP, or without ZeRO
  kBatchDivisibility,    // B not divisible by b x d
  kInterleavedNeedsPp,   // interleaving with PP 1 or fewer than 2 chunks
  kChunksWithoutInterleaving,
  kInterleavedMicrobatches,  // m not a multiple of PP
  kSequenceParallelNeedsTp,
  kZeroStage,
  kOffloadNeedsZero,
  kSeqLenTooLong,
  kSequenceParallelSeqLen,  // SP splits the sequence over TP: seq_len must divide by tp
  kTooManyMicroBatches,     // m above kMaxMicroBatches
  kCpSeqLen,                // CP's causal split needs seq_len divisible by 2 cp
  kCpHeads,                 // CP all-to-all (Ulysses) needs heads and KV heads divisible by tp x cp
  kCpNeedsFlash,            // CP runs fused attention only
  kEpExperts,               // EP needs an MoE model whose experts it divides
  kEpDataRanks,             // EP must divide (tp / etp) x cp x dp; etp must divide tp and the FFN
  kEpSharding,              // EP with hybrid sharding
  kCount
};
const char* violation_key(Violation v);  // short snake_case name, for rejection tables
// The first constraint `plan` breaks for `model` on nodes of `gpus_per_node`, or kNone.
Violation first_violation(const Plan& plan, const ModelSpec& model, int64_t gpus_per_node);
// The same as one line naming the constraint and the numbers, or "" when the plan is valid.
std::string describe_violation(Violation v, const Plan& plan, const ModelSpec& model,
                               int64_t gpus_per_node);
Status check_plan(const Plan& plan, const ModelSpec& model, int64_t gpus_per_node);

nlohmann::json plan_to_json(const Plan& plan);
// Reads the JSON of plan_to_json; `execution` and keys with documented defaults may be absent.
// `execution.framework` names a profile (framework.h) whose settings the other execution keys
// override.
Result<Plan> plan_from_json(const nlohmann::json& j, const std::string& where);
Result<Plan> load_plan(const std::string& path);

}  // namespace parallax
