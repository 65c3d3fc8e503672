#include "program/plan.h"

#include <algorithm>

#include "models/json_fields.h"
#include "program/framework.h"
#include "program/pipeline_layout.h"

namespace parallax {

namespace {
template <class E, size_t N>
std::optional<E> parse_enum(const std::string& s, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table)
    if (s == name) return value;
  return std::nullopt;
}
const std::pair<const char*, Schedule> kSchedules[] = {
    {"gpipe", Schedule::kGpipe}, {"1f1b", Schedule::k1F1B},
    {"interleaved", Schedule::kInterleaved}, {"zb-h1", Schedule::kZbH1}};
const std::pair<const char*, Recompute> kRecomputes[] = {
    {"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}};
const std::pair<const char*, Precision> kPrecisions[] = {
    {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}, {"fp8", Precision::kFp8}};
const std::pair<const char*, CpComm> kCpComms[] = {
    {"p2p", CpComm::kP2p}, {"all-gather", CpComm::kAllGather}, {"a2a", CpComm::kAllToAll}};
const std::pair<const char*, Fp8Recipe> kFp8Recipes[] = {{"delayed", Fp8Recipe::kDelayed}, {"current", Fp8Recipe::kCurrent}, {"rowwise", Fp8Recipe::kRowwise},
                                                            {"blockwise", Fp8Recipe::kBlockwise}, {"mxfp8", Fp8Recipe::kMxfp8}};
const std::pair<const char*, LossKernel> kLossKernels[] = {
    {"fused", LossKernel::kFused}, {"megatron", LossKernel::kMegatron}, {"megatron-fused", LossKernel::kMegatronFused},
    {"eager", LossKernel::kEager}, {"eager-fp32", LossKernel::kEagerFp32}};
const std::pair<const char*, MoeDispatcher> kDispatchers[] = {{"alltoall", MoeDispatcher::kAllToAll}, {"deepep", MoeDispatcher::kDeepEp}};
const std::pair<const char*, AttentionKernel> kKernels[] = {
    {"flash", AttentionKernel::kFlash}, {"materialized", AttentionKernel::kMaterialized}};
const std::pair<const char*, KernelFusion> kFusions[] = {{"fused", KernelFusion::kFused}, {"eager", KernelFusion::kEager}};
const std::pair<const char*, SelectiveRecompute> kSelectives[] = {
    {"attention-core", SelectiveRecompute::kAttentionCore}, {"ops", SelectiveRecompute::kOps}};

template <class E, size_t N>
const char* enum_name(E value, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, v] : table)
    if (v == value) return name;
  return "?";
}
}  // namespace

const char* schedule_name(Schedule s) { return enum_name(s, kSchedules); }
const char* recompute_name(Recompute r) { return enum_name(r, kRecomputes); }
const char* precision_name(Precision p) { return enum_name(p, kPrecisions); }
const char* attention_name(AttentionKernel k) { return enum_name(k, kKernels); }
const char* kernels_name(KernelFusion k) { return enum_name(k, kFusions); }
const char* selective_name(SelectiveRecompute s) { return enum_name(s, kSelectives); }

const std::pair<const char*, unsigned> kRecomputeModules[] = {
    {"core_attn", kCoreAttn}, {"layernorm", kLayernorm}, {"moe_act", kMoeAct}, {"mla_up_proj", kMlaUpProj}};

std::vector<std::string> recompute_module_names(unsigned modules) {
  std::vector<std::string> names;
  for (const auto& [name, bit] : kRecomputeModules)
    if (modules & bit) names.push_back(name);
  return names;
}

std::string recompute_modules_text(unsigned modules, const std::string& separator) {
  std::string text;
  for (const std::string& name : recompute_module_names(modules)) text += (text.empty() ? "" : separator) + name;
  return text;
}

std::optional<unsigned> parse_recompute_module(const std::string& name) {
  for (const auto& [known, bit] : kRecomputeModules)
    if (name == known) return bit;
  return std::nullopt;
}
const char* cp_comm_name(CpComm c) { return enum_name(c, kCpComms); }
const char* fp8_recipe_name(Fp8Recipe r) { return enum_name(r, kFp8Recipes); }
std::optional<CpComm> parse_cp_comm(const std::string& s) { return parse_enum(s, kCpComms); }
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& s) { return parse_enum(s, kFp8Recipes); }
const char* moe_dispatcher_name(MoeDispatcher d) { return enum_name(d, kDispatchers); }
std::optional<MoeDispatcher> parse_moe_dispatcher(const std::string& s) { return parse_enum(s, kDispatchers); }
const char* loss_kernel_name(LossKernel k) { return enum_name(k, kLossKernels); }
std::optional<LossKernel> parse_loss_kernel(const std::string& s) { return parse_enum(s, kLossKernels); }
std::optional<std::string> parse_attention_impl(const std::string& s) {
  if (s == "parallax" || s.empty()) return std::string();
  if (s == "fa2" || s == "fa3" || s == "cudnn") return s;
  return std::nullopt;
}
std::optional<Schedule> parse_schedule(const std::string& s) { return parse_enum(s, kSchedules); }
std::optional<Recompute> parse_recompute(const std::string& s) { return parse_enum(s, kRecomputes); }
std::optional<Precision> parse_precision(const std::string& s) { return parse_enum(s, kPrecisions); }

const char* violation_key(Violation v) {
  switch (v) {
    case Violation::kNone: return "none";
    case Violation::kTpHeads: return "tp_does_not_divide_heads";
    case Violation::kTpKvHeads: return "tp_does_not_divide_kv_heads";
    case Violation::kTpFfn: return "tp_does_not_divide_ffn_hidden";
    case Violation::kTpAcrossNodes: return "tp_larger_than_node";
    case Violation::kLayersPp: return "layers_not_divisible_by_pp_chunks";
    case Violation::kUnevenStages: return "uneven_stages";
    case Violation::kPipelineLayout: return "pipeline_layout";
    case Violation::kHybridSharding: return "hybrid_sharding";
    case Violation::kBatchDivisibility: return "global_batch_not_divisible";
    case Violation::kInterleavedNeedsPp: return "interleaved_needs_pp_and_chunks";
    case Violation::kChunksWithoutInterleaving: return "chunks_without_interleaving";
    case Violation::kInterleavedMicrobatches: return "interleaved_needs_m_multiple_of_pp";
    case Violation::kSequenceParallelNeedsTp: return "sequence_parallel_needs_tp";
    case Violation::kZeroStage: return "zero_stage_out_of_range";
    case Violation::kOffloadNeedsZero: return "offload_needs_zero";
    case Violation::kSeqLenTooLong: return "seq_len_exceeds_max_positions";
    case Violation::kSequenceParallelSeqLen: return "sequence_parallel_needs_seq_len_multiple_of_tp";
    case Violation::kTooManyMicroBatches: return "too_many_micro_batches";
    case Violation::kCpSeqLen: return "cp_needs_seq_len_multiple_of_2cp";
    case Violation::kCpHeads: return "cp_a2a_needs_heads_multiple_of_tp_cp";
    case Violation::kCpNeedsFlash: return "cp_needs_flash_attention";
    case Violation::kEpExperts: return "ep_does_not_divide_experts";
    case Violation::kEpDataRanks: return "ep_does_not_divide_cp_dp";
    case Violation::kEpSharding: return "ep_with_dp_shard";
    case Violation::kCount: break;
  }
  return "?";
}

Violation first_violation(const Plan& p, const ModelSpec& m, int64_t gpus_per_node) {
  if (m.heads % p.tp != 0) return Violation::kTpHeads;
  if (m.kv_heads % p.tp != 0) return Violation::kTpKvHeads;
  if (m.ffn_hidden % p.tp != 0) return Violation::kTpFfn;
  if (!p.tp_across_nodes && (p.tp > gpus_per_node || gpus_per_node % p.tp != 0))
    return Violation::kTpAcrossNodes;
  if (p.schedule == Schedule::kInterleaved && (p.pp < 2 || p.virtual_stages < 2))
    return Violation::kInterleavedNeedsPp;
  if (p.schedule != Schedule::kInterleaved && p.virtual_stages != 1)
    return Violation::kChunksWithoutInterleaving;
  if (!p.pipeline_layout.empty()) {
    if (p.pp < 2 || p.first_stage_layers != 0 || p.last_stage_layers != 0 ||
        static_cast<int64_t>(p.pipeline_layout.size()) != p.pp * p.virtual_stages)
      return Violation::kPipelineLayout;
    int64_t sum = 0;
    for (int64_t n : p.pipeline_layout) {
      if (n < 0 || n > m.layers) return Violation::kPipelineLayout;
      sum += n;
    }
    if (sum != m.layers) return Violation::kPipelineLayout;
  } else if (p.uneven()) {
    if (p.pp < 2 || p.virtual_stages != 1 || p.first_stage_layers < 0 || p.last_stage_layers < 0)
      return Violation::kUnevenStages;
    const int64_t set = (p.first_stage_layers > 0) + (p.last_stage_layers > 0), others = p.pp - set;
    const int64_t rest = m.layers - p.first_stage_layers - p.last_stage_layers;
    if (rest < others || (others == 0 ? rest != 0 : rest % others != 0)) return Violation::kUnevenStages;
  } else if (m.layers % (p.pp * p.virtual_stages) != 0) {
    return Violation::kLayersPp;
  }
  if (p.global_batch % (p.micro_batch * p.dp) != 0) return Violation::kBatchDivisibility;
  if (p.dp_shard < 0 || (p.dp_shard > 0 && (p.data_ranks() % p.dp_shard != 0 || (p.zero < 1 && p.dp_shard < p.data_ranks()))))
    return Violation::kHybridSharding;
  if (p.schedule == Schedule::kInterleaved && p.micro_batches() % p.pp != 0)
    return Violation::kInterleavedMicrobatches;
  if (p.sequence_parallel && p.tp < 2) return Violation::kSequenceParallelNeedsTp;
  if (p.zero < 0 || p.zero > 3) return Violation::kZeroStage;
  if (p.offload && p.zero < 1) return Violation::kOffloadNeedsZero;
  if (p.seq_len > m.max_positions) return Violation::kSeqLenTooLong;
  if (p.sequence_parallel && (p.seq_len / p.cp) % p.tp != 0) return Violation::kSequenceParallelSeqLen;
  if (p.micro_batches() > kMaxMicroBatches) return Violation::kTooManyMicroBatches;
  if (p.cp > 1 && p.seq_len % (2 * p.cp) != 0) return Violation::kCpSeqLen;
  if (p.cp > 1 && p.execution.cp_comm == CpComm::kAllToAll && (m.heads % (p.tp * p.cp) != 0 || m.kv_heads % (p.tp * p.cp) != 0))
    return Violation::kCpHeads;
  if (p.cp > 1 && p.execution.attention != AttentionKernel::kFlash) return Violation::kCpNeedsFlash;
  if (p.ep > 1 && (!m.is_moe() || m.experts % p.ep != 0)) return Violation::kEpExperts;
  if (p.etp < 0 || p.tp % p.expert_tp() != 0 || m.ffn_hidden % p.expert_tp() != 0 || p.expert_slots() % p.ep != 0)
    return Violation::kEpDataRanks;
  if (p.ep > 1 && p.hybrid_sharding()) return Violation::kEpSharding;
  return Violation::kNone;
}

std::string describe_violation(Violation v, const Plan& p, const ModelSpec& m, int64_t gpus_per_node) {
  auto s = [](int64_t x) { return std::to_string(x); };
  switch (v) {
    case Violation::kNone: return "";
    case Violation::kTpHeads:
      return "tp " + s(p.tp) + " does not divide num_attention_heads " + s(m.heads);
    case Violation::kTpKvHeads:
      return "tp " + s(p.tp) + " does not divide num_key_value_heads " + s(m.kv_heads);
    case Violation::kTpFfn:
      return "tp " + s(p.tp) + " does not divide intermediate_size " + s(m.ffn_hidden);
    case Violation::kTpAcrossNodes:
      return "tp " + s(p.tp) + " does not fit in a node of " + s(gpus_per_node) +
             " GPUs (set tp_across_nodes to allow)";
    case Violation::kLayersPp:
      return "num_layers " + s(m.layers) + " is not divisible by pp " + s(p.pp) + " x virtual_stages " +
             s(p.virtual_stages);
    case Violation::kUnevenStages:
      return "first_stage_layers " + s(p.first_stage_layers) + " and last_stage_layers " + s(p.last_stage_layers) +
             " need pp >= 2 without interleaving and must leave the other stages an equal share (at least 1) of "
             "num_layers " + s(m.layers) + " (pp " + s(p.pp) + ")";
    case Violation::kPipelineLayout: {
      int64_t sum = 0;
      for (int64_t n : p.pipeline_layout) sum += std::max<int64_t>(n, 0);
      return "pipeline_layout has " + s(static_cast<int64_t>(p.pipeline_layout.size())) + " chunks of " + s(sum) +
             " layers; it needs pp " + s(p.pp) + " >= 2 x virtual_stages " + s(p.virtual_stages) +
             " chunks of num_layers " + s(m.layers) + " in all, and no first/last_stage_layers";
    }
    case Violation::kHybridSharding:
      return "dp_shard " + s(p.dp_shard) + " must divide " + (p.cp > 1 ? "cp x dp " : "dp ") + s(p.data_ranks()) +
             " and needs zero >= 1 (zero " + s(p.zero) + ")";
    case Violation::kBatchDivisibility:
      return "global_batch " + s(p.global_batch) + " is not divisible by micro_batch " + s(p.micro_batch) +
             " x dp " + s(p.dp) + " (m = B/(b*d) must be an integer)";
    case Violation::kInterleavedNeedsPp:
      return "schedule interleaved needs pp >= 2 and virtual_stages >= 2 (pp " + s(p.pp) +
             ", virtual_stages " + s(p.virtual_stages) + ")";
    case Violation::kChunksWithoutInterleaving:
      return std::string("virtual_stages ") + s(p.virtual_stages) + " needs schedule interleaved, not " +
             schedule_name(p.schedule);
    case Violation::kInterleavedMicrobatches:
      return "schedule interleaved needs micro-batches m = " + s(p.micro_batches()) +
             " to be a multiple of pp " + s(p.pp);
    case Violation::kSequenceParallelNeedsTp: return "sequence_parallel needs tp > 1";
    case Violation::kZeroStage: return "zero must be 0, 1, 2 or 3, got " + s(p.zero);
    case Violation::kOffloadNeedsZero: return "offload needs zero >= 1";
    case Violation::kSeqLenTooLong:
      return "seq_len " + s(p.seq_len) + " exceeds the model's max_position_embeddings " + s(m.max_positions);
    case Violation::kSequenceParallelSeqLen:
      return "sequence_parallel splits seq_len " + s(p.seq_len) + (p.cp > 1 ? " / cp " + s(p.cp) : "") + " over tp " +
             s(p.tp) + ": it must divide";
    case Violation::kTooManyMicroBatches:
      return "micro-batches m = " + s(p.micro_batches()) + " exceed " + s(kMaxMicroBatches) +
             " (raise micro_batch or lower global_batch)";
    case Violation::kCpSeqLen:
      return "cp " + s(p.cp) + " splits seq_len " + s(p.seq_len) + " into 2 x cp chunks for causal load balancing: it must divide by " +
             s(2 * p.cp);
    case Violation::kCpHeads:
      return "cp_comm a2a splits heads over tp x cp " + s(p.tp * p.cp) + ": it must divide num_attention_heads " + s(m.heads) +
             " and num_key_value_heads " + s(m.kv_heads);
    case Violation::kCpNeedsFlash: return "cp " + s(p.cp) + " needs execution.attention flash (fused attention kernels)";
    case Violation::kEpExperts:
      return m.is_moe() ? "ep " + s(p.ep) + " does not divide the " + s(m.experts) + " experts"
                        : "ep " + s(p.ep) + " needs a mixture-of-experts model (" + m.name + " is dense)";
    case Violation::kEpDataRanks:
      return "ep " + s(p.ep) + " must divide (tp / etp) x cp x dp = " + s(p.expert_slots()) + " and etp " + s(p.expert_tp()) +
             " must divide tp " + s(p.tp) + " and the FFN size " + s(m.ffn_hidden) +
             " (experts are split over the data-parallel ranks)";
    case Violation::kEpSharding:
      return "ep " + s(p.ep) + " does not combine with hybrid sharding (dp_shard " + s(p.dp_shard) + " < cp x dp " +
             s(p.data_ranks()) + ")";
    case Violation::kCount: break;
  }
  return "invalid plan";
}

Status check_plan(const Plan& plan, const ModelSpec& model, int64_t gpus_per_node) {
  // Bounds that keep the plan's products (GPUs, tokens per step) far from int64 overflow.
  const std::pair<const char*, int64_t> sizes[] = {{"tp", plan.tp}, {"pp", plan.pp}, {"dp", plan.dp},
                                                   {"cp", plan.cp}, {"ep", plan.ep}, {"etp", plan.etp},
                                                   {"virtual_stages", plan.virtual_stages},
                                                   {"micro_batch", plan.micro_batch}};
  for (const auto& [key, value] : sizes)
    if (value > (int64_t{1} << 24)) return Error{"invalid plan: " + std::string(key) + " " + std::to_string(value) + " is above the supported 2^24"};
  if (double(plan.tp) * double(plan.cp) * double(plan.pp) * double(plan.dp) > 1e8)
    return Error{"invalid plan: tp x cp x pp x dp is above the supported 10^8 GPUs"};
  if (plan.global_batch > 1'000'000'000'000) return Error{"invalid plan: global_batch is above the supported 10^12"};
  Violation v = first_violation(plan, model, gpus_per_node);
  if (v == Violation::kNone) return Status::Ok();
  return Error{"invalid plan: " + describe_violation(v, plan, model, gpus_per_node)};
}

Plan::LayerRange Plan::chunk_layers(int64_t layers, int64_t stage, int64_t chunk) const {
  if (!pipeline_layout.empty()) {
    const size_t k = static_cast<size_t>(chunk * pp + stage);
    int64_t first = 0;
    for (size_t i = 0; i < k; ++i) first += pipeline_layout[i];
    return {first, pipeline_layout[k]};
  }
  if (!uneven()) {
    const int64_t per = layers / (pp * virtual_stages);
    return {(chunk * pp + stage) * per, per};
  }
  const int64_t set = (first_stage_layers > 0) + (last_stage_layers > 0);
  const int64_t middle = (layers - first_stage_layers - last_stage_layers) / std::max<int64_t>(pp - set, 1);
  const int64_t first = first_stage_layers > 0 ? first_stage_layers : middle;
  const int64_t last = last_stage_layers > 0 ? last_stage_layers : middle;
  if (stage == 0) return {0, first};
  if (stage == pp - 1) return {layers - last, last};
  return {first + (stage - 1) * middle, middle};
}

std::vector<Plan::LayerRange> Plan::uneven_chunk_layers(int64_t layers, int64_t stage) const {
  std::vector<LayerRange> out;
  if (uneven())
    for (int64_t c = 0; c < virtual_stages; ++c) out.push_back(chunk_layers(layers, stage, c));
  return out;
}

int64_t Plan::stage_layers(int64_t layers, int64_t stage) const {
  if (!uneven()) return layers / pp;
  if (pipeline_layout.empty()) return chunk_layers(layers, stage).count;
  int64_t n = 0;
  for (int64_t c = 0; c < virtual_stages; ++c) n += pipeline_layout[static_cast<size_t>(c * pp + stage)];
  return n;
}

int64_t Plan::max_stage_layers(int64_t layers) const {
  if (!uneven()) return layers / pp;
  int64_t most = 0;
  for (int64_t s = 0; s < pp; ++s) most = std::max(most, stage_layers(layers, s));
  return most;
}

nlohmann::json plan_to_json(const Plan& p) {
  const Execution& e = p.execution;
  return {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"etp", p.etp}, {"zero", p.zero},
          {"micro_batch", p.micro_batch}, {"global_batch", p.global_batch}, {"seq_len", p.seq_len},
          {"schedule", schedule_name(p.schedule)}, {"virtual_stages", p.virtual_stages},
          {"recompute", recompute_name(p.recompute)}, {"sequence_parallel", p.sequence_parallel},
          {"precision", precision_name(p.precision)}, {"offload", p.offload},
          {"tp_across_nodes", p.tp_across_nodes},
          {"first_stage_layers", p.first_stage_layers}, {"last_stage_layers", p.last_stage_layers},
          {"pipeline_layout", p.pipeline_layout},
          {"dp_shard", p.dp_shard},
          {"execution",
           {{"framework", e.framework}, {"attention", attention_name(e.attention)},
            {"attention_impl", e.attention_impl}, {"kernels", kernels_name(e.kernels)}, {"selective", selective_name(e.selective)},
            {"recompute_modules", recompute_module_names(e.recompute_modules)},
            {"recompute_fraction", e.recompute_fraction},
            {"overlap_grad_reduce", e.overlap_grad_reduce}, {"overlap_param_gather", e.overlap_param_gather},
            {"overlap_p2p", e.overlap_p2p}, {"tp_comm_overlap", e.tp_comm_overlap},
            {"dp_bucket_mib", e.dp_bucket_mib}, {"megatron_buckets", e.megatron_buckets}, {"allocator_margin", e.allocator_margin},
            {"microbatch_overhead_us", e.microbatch_overhead_us},
            {"step_overhead_us", e.step_overhead_us}, {"fp32_gradients", e.fp32_gradients},
            {"bf16_optimizer_states", e.bf16_optimizer_states}, {"cp_comm", cp_comm_name(e.cp_comm)},
            {"moe_imbalance", e.moe_imbalance}, {"moe_capacity_factor", e.moe_capacity_factor},
            {"moe_dispatcher", moe_dispatcher_name(e.moe_dispatcher)}, {"moe_a2a_overlap", e.moe_a2a_overlap},
            {"fp8_recipe", fp8_recipe_name(e.fp8_recipe)}, {"fp8_param_gather", e.fp8_param_gather},
            {"loss", loss_kernel_name(e.loss)}, {"gather_copy_out", e.gather_copy_out}, {"reduce_copy_in", e.reduce_copy_in},
            {"dense_embedding_grad", e.dense_embedding_grad}}}};
}

namespace {
template <class E>
E read_enum(JsonFields& f, const char* key, std::optional<E> (*parse)(const std::string&),
            const char* allowed, E fallback) {
  std::string text = f.required_string(key);
  if (!f.ok()) return fallback;
  std::optional<E> value = parse(text);
  if (!value) f.fail(key, "unknown value '" + text + "' (expected " + allowed + ")");
  return value.value_or(fallback);
}

std::optional<AttentionKernel> parse_kernel(const std::string& s) { return parse_enum(s, kKernels); }
std::optional<KernelFusion> parse_fusion(const std::string& s) { return parse_enum(s, kFusions); }
std::optional<SelectiveRecompute> parse_selective(const std::string& s) { return parse_enum(s, kSelectives); }

// "recompute_modules": a non-empty list of Megatron's module names, under the attention-core policy.
unsigned read_recompute_modules(JsonFields& f, const Execution& e) {
  const nlohmann::json& list = f.object().at("recompute_modules");
  unsigned modules = 0;
  if (!list.is_array() || list.empty()) f.fail("recompute_modules", "must be a non-empty list (core_attn, layernorm, moe_act, mla_up_proj)");
  for (const auto& x : f.ok() ? list : nlohmann::json::array()) {
    const std::optional<unsigned> bit = x.is_string() ? parse_recompute_module(x.get<std::string>()) : std::nullopt;
    if (!bit) {
      f.fail("recompute_modules", "unknown module " + x.dump() + " (expected core_attn|layernorm|moe_act|mla_up_proj)");
      break;
    }
    modules |= *bit;
  }
  if (f.ok() && e.selective == SelectiveRecompute::kOps && modules != kCoreAttn)
    f.fail("recompute_modules", "are Megatron's; selective 'ops' is torchtitan's op-level policy");
  return f.ok() ? modules : e.recompute_modules;
}

// Returns the first problem as one line, or "".
std::string read_execution(const nlohmann::json& j, const std::string& where, Execution& e) {
  JsonFields f(j, where + ": execution");
  if (std::optional<std::string> name = f.optional_string("framework"); name && !name->empty()) {
    Result<FrameworkProfile> profile = framework_profile(*name);
    if (!profile.ok()) f.fail("framework", profile.error());
    else e = profile->execution;
  }
  if (f.has("attention"))
    e.attention = read_enum(f, "attention", parse_kernel, "flash|materialized", e.attention);
  if (f.has("attention_impl")) {
    const std::string name = f.required_string("attention_impl");
    const std::optional<std::string> impl = parse_attention_impl(name);
    if (f.ok() && !impl) f.fail("attention_impl", "unknown '" + name + "' (expected " + kAttentionImpls + ")");
    e.attention_impl = impl.value_or("");
  }
  if (f.has("kernels")) e.kernels = read_enum(f, "kernels", parse_fusion, "fused|eager", e.kernels);
  if (f.has("selective"))
    e.selective = read_enum(f, "selective", parse_selective, "attention-core|ops", e.selective);
  if (f.ok() && f.has("recompute_modules")) e.recompute_modules = read_recompute_modules(f, e);
  e.overlap_grad_reduce = f.optional_bool("overlap_grad_reduce", e.overlap_grad_reduce);
  e.overlap_p2p = f.optional_bool("overlap_p2p", e.overlap_p2p);
  e.tp_comm_overlap = f.optional_bool("tp_comm_overlap", e.tp_comm_overlap);
  e.overlap_param_gather = f.optional_bool("overlap_param_gather", e.overlap_param_gather);
  e.dp_bucket_mib = f.optional_number("dp_bucket_mib").value_or(e.dp_bucket_mib);
  e.megatron_buckets = f.optional_bool("megatron_buckets", e.megatron_buckets);
  e.allocator_margin = f.optional_number("allocator_margin", true).value_or(e.allocator_margin);
  e.microbatch_overhead_us = f.optional_number("microbatch_overhead_us", true).value_or(e.microbatch_overhead_us);
  e.step_overhead_us = f.optional_number("step_overhead_us", true).value_or(e.step_overhead_us);
  e.fp32_gradients = f.optional_bool("fp32_gradients", e.fp32_gradients);
  e.bf16_optimizer_states = f.optional_bool("bf16_optimizer_states", e.bf16_optimizer_states);
  if (f.has("cp_comm")) e.cp_comm = read_enum(f, "cp_comm", parse_cp_comm, "p2p|all-gather|a2a", e.cp_comm);
  e.recompute_fraction = f.optional_number("recompute_fraction").value_or(e.recompute_fraction);
  if (f.ok() && e.recompute_fraction > 1) f.fail("recompute_fraction", "is a share of the layers and must be <= 1");
  e.moe_imbalance = f.optional_number("moe_imbalance", true).value_or(e.moe_imbalance);
  e.moe_capacity_factor = f.optional_number("moe_capacity_factor", true).value_or(e.moe_capacity_factor);
  if (f.has("moe_dispatcher"))
    e.moe_dispatcher = read_enum(f, "moe_dispatcher", parse_moe_dispatcher, "alltoall|deepep", e.moe_dispatcher);
  e.moe_a2a_overlap = f.optional_bool("moe_a2a_overlap", e.moe_a2a_overlap);
  if (f.has("fp8_recipe")) e.fp8_recipe = read_enum(f, "fp8_recipe", parse_fp8_recipe, "delayed|current|rowwise|blockwise|mxfp8", e.fp8_recipe);
  e.fp8_param_gather = f.optional_bool("fp8_param_gather", e.fp8_param_gather);
  if (f.has("loss")) e.loss = read_enum(f, "loss", parse_loss_kernel, kLossKernelNames, e.loss);
  e.gather_copy_out = f.optional_bool("gather_copy_out", e.gather_copy_out);
  e.reduce_copy_in = f.optional_bool("reduce_copy_in", e.reduce_copy_in);
  e.dense_embedding_grad = f.optional_bool("dense_embedding_grad", e.dense_embedding_grad);
  if (f.ok() && e.moe_imbalance != 0 && (e.moe_imbalance < 1 || e.moe_imbalance > 1e3))
    f.fail("moe_imbalance", "must be between 1 (balanced) and 1000, or 0 (a trained router's default)");
  if (f.ok() && e.moe_capacity_factor > 1e3) f.fail("moe_capacity_factor", "must be <= 1000 (0: dropless)");
  // Bounds that keep every derived byte count and time finite.
  if (f.ok() && e.dp_bucket_mib > 1e6) f.fail("dp_bucket_mib", "must be <= 1e6");
  if (f.ok() && e.allocator_margin > 1) f.fail("allocator_margin", "is a fraction and must be <= 1");
  if (f.ok() && (e.microbatch_overhead_us > 1e9 || e.step_overhead_us > 1e9)) f.fail("overhead", "must be <= 1e9 us");
  f.reject_unknown_keys();
  return f.error();
}
// An array of layer counts per chunk, or Megatron's layout string; [] = none.
Result<std::vector<int64_t>> read_pipeline_layout(const nlohmann::json& v) {
  if (v.is_string()) return parse_megatron_layout(v.get<std::string>());
  if (!v.is_array()) return Error{"must be an array of layers per chunk or a Megatron layout string"};
  std::vector<int64_t> out;
  for (const nlohmann::json& n : v) {
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      return Error{"must hold whole numbers >= 0 (layers per chunk), got " + n.dump()};
    out.push_back(n.get<int64_t>());
  }
  return out;
}
}  // namespace

Result<Plan> plan_from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  Plan p;
  p.tp = f.required_int("tp");
  p.pp = f.required_int("pp");
  p.dp = f.required_int("dp");
  p.cp = f.optional_int("cp").value_or(1);
  p.ep = f.optional_int("ep").value_or(1);
  p.etp = f.optional_int("etp", 0).value_or(0);
  const int64_t zero = f.required_int("zero", 0);
  if (f.ok() && zero > 3) f.fail("zero", "must be 0, 1, 2 or 3, got " + std::to_string(zero));
  p.zero = static_cast<int>(std::min<int64_t>(zero, 3));
  p.micro_batch = f.required_int("micro_batch");
  p.global_batch = f.required_int("global_batch");
  p.seq_len = f.required_int("seq_len");
  p.schedule = read_enum(f, "schedule", parse_schedule, "gpipe|1f1b|interleaved|zb-h1", p.schedule);
  p.virtual_stages = f.optional_int("virtual_stages").value_or(1);
  p.recompute = read_enum(f, "recompute", parse_recompute, "none|selective|full", p.recompute);
  p.sequence_parallel = f.optional_bool("sequence_parallel", false);
  p.precision = read_enum(f, "precision", parse_precision, "fp32|bf16|fp16|fp8", p.precision);
  p.offload = f.optional_bool("offload", false);
  p.tp_across_nodes = f.optional_bool("tp_across_nodes", false);
  p.first_stage_layers = f.optional_int("first_stage_layers", 0).value_or(0);
  p.last_stage_layers = f.optional_int("last_stage_layers", 0).value_or(0);
  p.dp_shard = f.optional_int("dp_shard", 0).value_or(0);
  if (f.ok() && f.has("pipeline_layout")) {
    Result<std::vector<int64_t>> layout = read_pipeline_layout(j.at("pipeline_layout"));
    if (layout.ok()) p.pipeline_layout = std::move(layout.value());
    else f.fail("pipeline_layout", layout.error());
  }
  f.reject_unknown_keys({"execution", "pipeline_layout"});
  if (!f.ok()) return Error{f.error()};
  if (f.has("execution")) {
    std::string error = read_execution(j.at("execution"), where, p.execution);
    if (!error.empty()) return Error{error};
  }
  if (p.execution.recompute_fraction < 1 && p.recompute != Recompute::kFull)
    return Error{where + ": execution: key 'recompute_fraction': applies to recompute full, not " + recompute_name(p.recompute)};
  return p;
}

Result<Plan> load_plan(const std::string& path) {
  Result<nlohmann::json> j = read_json_file(path);
  if (!j.ok()) return Error{j.error()};
  return plan_from_json(*j, path);
}

}  // namespace parallax
