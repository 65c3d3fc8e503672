#include "program/step_program.h"

#include <algorithm>
#include <cmath>

#include "models/layer_cost.h"
#include "program/model_state.h"

namespace parallax {

namespace {

double d(int64_t x) { return static_cast<double>(x); }
constexpr int64_t kMaxBucketsPerChunk = 64;

std::string mb_chunk(const ProgramOp& op) {
  return "mb=" + std::to_string(op.micro_batch) + " chunk=" + std::to_string(op.chunk);
}
const char* pass_letter(OpKind k) { return k == OpKind::kForward ? "F" : k == OpKind::kBackward ? "B" : "W"; }

}  // namespace

std::string op_name(const ProgramOp& op) {
  const std::string bucket = "bucket=" + std::to_string(op.bucket);
  switch (op.type) {
    case ProgramOpType::kCompute: return std::string(pass_letter(op.pass)) + " " + mb_chunk(op);
    case ProgramOpType::kSend: return std::string("send pp ") + pass_letter(op.pass) + " " + mb_chunk(op);
    case ProgramOpType::kRecv: return std::string("recv pp ") + pass_letter(op.pass) + " " + mb_chunk(op);
    case ProgramOpType::kOptimizer: return "optimizer";
    case ProgramOpType::kCollective: break;
  }
  const std::string coll = collective_name(op.collective);
  switch (op.role) {
    case CollectiveRole::kGradientBucket:
    case CollectiveRole::kWeightBucket: return coll + " dp " + bucket;
    case CollectiveRole::kGradientShard: return coll + " dp " + mb_chunk(op);
    case CollectiveRole::kWeightGather: return coll + " dp " + pass_letter(op.pass) + " " + mb_chunk(op);
    case CollectiveRole::kNormGradients:
      return coll + " tp norms " + (op.micro_batch >= 0 ? mb_chunk(op) : "chunk=" + std::to_string(op.chunk));
    case CollectiveRole::kEmbedding: return coll + " embedding";
    case CollectiveRole::kReplicaReduce:
      return coll + " dp-replica " + (op.bucket >= 0 ? bucket : mb_chunk(op));
    case CollectiveRole::kExpertGradients:
      return coll + " expert-dp " + (op.micro_batch >= 0 ? mb_chunk(op) : "chunk=" + std::to_string(op.chunk));
    case CollectiveRole::kExpertWeights:
      return coll + " expert-dp" + (op.micro_batch >= 0 ? std::string(" ") + pass_letter(op.pass) + " " + mb_chunk(op) : "");
    case CollectiveRole::kNone: break;
  }
  return coll;
}

std::string tp_event_name(const ProgramOp& op) { return "tp " + op_name(op); }

double sp_gather_share(const Plan& plan) {
  const bool quantized = plan.precision == Precision::kFp8 && plan.execution.fp8_recipe != Fp8Recipe::kRowwise;
  return plan.sequence_parallel && quantized ? 0.5 : 1.0;
}

TpTraffic tp_traffic(const ModelSpec& m, const Plan& plan, OpKind pass) {
  TpTraffic t;
  if (plan.tp < 2) return t;
  t.bytes = boundary_tensor_bytes(m, plan);
  const bool sp = plan.sequence_parallel;
  // Per pair of GEMM blocks (attention, MLP): one all-reduce, or with SP an all-gather and a
  // reduce-scatter. An MoE layer's MLP block gathers every routed copy of its tokens (top-k x the
  // attention's buffer) over the expert TP ranks (etp of them, with etp / tp of the tokens);
  // `bytes` is the mean of the two blocks' buffers.
  const int64_t mlp_ranks = m.is_moe() ? plan.expert_tp() : plan.tp;
  const double attention = t.bytes;
  const double mlp = m.is_moe() ? attention * static_cast<double>(m.experts_per_token * mlp_ranks) / static_cast<double>(plan.tp)
                                : attention;
  t.bytes = (attention + mlp) / 2.0;
  const int per_block = sp ? 2 : 1;
  const Collective one = sp ? Collective::kAllGather : Collective::kAllReduce;
  const double gathered = sp_gather_share(plan);
  auto sent = [&](Collective op) {
    return collective_bytes_per_rank(op, attention, plan.tp) + collective_bytes_per_rank(op, mlp, mlp_ranks);
  };
  // Sent per pair of blocks (attention + MLP), counted as two blocks below: with SP a gather and
  // a reduce-scatter (the same bytes in bf16), else an all-reduce.
  const double sent_per_block = (sp ? (1 + gathered) * sent(one) : sent(one)) / 2.0;
  double blocks = 0;
  switch (pass) {
    case OpKind::kForward: blocks = 2; break;
    case OpKind::kBackward: blocks = plan.recompute == Recompute::kFull ? 2 + 2 * plan.execution.recompute_fraction : 2; break;
    case OpKind::kWeight:  // SP: the QKV and FC1 inputs are gathered again for their weight gradients
      if (!sp) return TpTraffic{};
      t.count = 2;
      t.sent_bytes = gathered * sent(Collective::kAllGather);
      return t;
  }
  t.count = blocks * per_block;
  t.sent_bytes = blocks * sent_per_block;
  return t;
}

int64_t dp_buckets_per_chunk(const ModelSpec& m, const Plan& plan, int64_t stage) {
  // Megatron-Core buckets only to overlap, and only on the first stage.
  if (plan.execution.megatron_buckets && (stage > 0 || !plan.execution.overlap_grad_reduce)) return 1;
  const double grad_bytes = stage_params_per_gpu(m, plan, stage) * bytes_per_param(plan).gradients / d(plan.virtual_stages);
  const double bucket = plan.execution.megatron_buckets
                            ? std::max(40e6, 1e6 * d(plan.dp)) * bytes_per_param(plan).gradients
                            : plan.execution.dp_bucket_mib * 1048576.0;
  const double n = bucket > 0 ? std::ceil(grad_bytes / bucket) : 1.0;
  return std::clamp<int64_t>(static_cast<int64_t>(std::min(n, 1e6)), 1, kMaxBucketsPerChunk);
}

ElementRange bucket_range(int64_t elements, int64_t n, int64_t k) {
  const int64_t per = (elements + n - 1) / n;
  return {std::min(k * per, elements), std::min((k + 1) * per, elements)};
}

int64_t send_target(const Plan& plan, OpKind pass, int64_t chunk, int64_t stage) {
  const int64_t vs = virtual_stage(stage, chunk, plan.pp), last = plan.pp * plan.virtual_stages - 1;
  if (pass == OpKind::kForward && vs < last) return vs + 1;
  if (pass == OpKind::kBackward && vs > 0) return vs - 1;
  return -1;
}

namespace {

// execution.moe_a2a_overlap: the passes whose expert all-to-alls hide behind a neighbour's
// compute. Megatron's combined 1F1B runs a forward beside the backward next to it in the schedule
// when the two belong to different (micro-batch, chunk)s (a backward cannot run beside its own
// forward): adjacent forward/backward pairs, taken in schedule order, each pass in at most one.
std::vector<bool> exchange_overlapped_passes(const std::vector<PipelineOp>& ops) {
  std::vector<bool> paired(ops.size(), false);
  for (size_t j = 0; j + 1 < ops.size(); ++j) {
    const PipelineOp &a = ops[j], &b = ops[j + 1];
    const bool opposite = (a.kind == OpKind::kForward && b.kind == OpKind::kBackward) ||
                          (a.kind == OpKind::kBackward && b.kind == OpKind::kForward);
    if (opposite && (a.micro_batch != b.micro_batch || a.chunk != b.chunk)) paired[j] = paired[j + 1] = true, ++j;
  }
  return paired;
}

// Builds one stage's ops (see step_program.h for the order).
class StageBuilder {
 public:
  StageBuilder(const ModelSpec& m, const StepProgram& prog, int64_t stage)
      : m_(m), p_(prog.plan), prog_(prog), stage_(stage), buckets_(dp_buckets_per_chunk(m, p_, stage)) {
    // With EP the experts' gradients and weights reduce and gather over their own group; without,
    // the experts are dense weights like the rest.
    StageParams params = stage_param_split(m, p_, stage);
    if (p_.ep == 1) params = {params.total(), 0};
    const ModelStateBytesPerParam bpp = bytes_per_param(p_);
    stage_grad_bytes_ = params.dense * bpp.gradients;
    stage_weight_bytes_ = params.dense * bpp.gathered;
    expert_grad_bytes_ = params.expert * bpp.gradients;
    expert_weight_bytes_ = params.expert * bpp.gathered;
    // A pass's ZeRO-2/3 collectives move its chunk's share (the runtimes gather and reduce the
    // chunk's buckets); one chunk: the stage's.
    for (int64_t chunk = 0; chunk < p_.virtual_stages; ++chunk) {
      StageParams c = p_.virtual_stages == 1 ? params : chunk_param_split(m, p_, stage, chunk);
      if (p_.ep == 1) c = {c.total(), 0};
      chunk_bytes_.push_back({c.dense * bpp.gathered, c.dense * bpp.gradients, c.expert * bpp.gathered, c.expert * bpp.gradients});
    }
    const ModelSpec dense = dense_layer_model(m);
    for (OpKind k : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) {
      tp_[static_cast<int>(k)] = tp_traffic(m, p_, k);
      tp_dense_[static_cast<int>(k)] = tp_traffic(dense, p_, k);
    }
    for (int g = 0; g < kGroupKinds; ++g) group_size_[g] = prog.grid.group_size(static_cast<GroupKind>(g));
    for (int64_t chunk = 0; chunk < p_.virtual_stages; ++chunk)
      for (OpKind k : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) pass_tp_.push_back(pass_tp_bytes(k, chunk));
  }

  StageProgram build(std::vector<PipelineOp> schedule) {
    out_.schedule = std::move(schedule);
    const auto& ops = out_.schedule;
    // Per pipeline op at most a gather, a receive, the pass, a send and a reduction.
    out_.ops.reserve((p_.zero >= 2 ? 5 : 3) * ops.size() + static_cast<size_t>(4 * p_.virtual_stages * buckets_) + 8);
    std::vector<size_t> last_release(p_.virtual_stages, 0);
    for (size_t j = 0; j < ops.size(); ++j)
      if (releases_activations(ops[j].kind, p_.schedule)) last_release[ops[j].chunk] = j;
    // ZeRO-2/3 reduce each pass's gradients into the shards; over one data rank (and no offload)
    // there is nothing to shard, and gradients accumulate over the step as with ZeRO 0 and 1.
    const bool per_pass = p_.zero >= 2 && p_.zero_shards();
    if (p_.execution.overlap_param_gather) add_weight_gathers(-1);  // the previous step's, in steady state
    // The tied embedding's all-reduce joins the first and the last stage, so it waits for each
    // stage's last pass (as Megatron's finalize_model_grads does): issued mid-pipeline it would
    // block a stage its partner still waits on. A chunk holding it reduces over DP after it.
    const std::vector<bool> overlapped =
        p_.execution.moe_a2a_overlap && p_.ep > 1 ? exchange_overlapped_passes(ops) : std::vector<bool>();
    for (size_t j = 0; j < ops.size(); ++j) {
      const int32_t c = add_pass(ops[j]);
      if (!overlapped.empty()) out_.ops[static_cast<size_t>(c)].exchange_overlapped = overlapped[j];
      if (per_pass && releases_activations(ops[j].kind, p_.schedule)) add_shard_reduction(ops[j], c);
      if (!per_pass && p_.execution.overlap_grad_reduce && j == last_release[ops[j].chunk] && !ties_embedding(ops[j].chunk))
        add_chunk_gradients(ops[j].chunk, c);
    }
    for (int64_t chunk = p_.virtual_stages - 1; chunk >= 0; --chunk) {  // after the whole backward, last chunk first
      if (per_pass && ties_embedding(chunk)) add_embedding_gradients(last_compute_, chunk);
      if (!per_pass && (!p_.execution.overlap_grad_reduce || ties_embedding(chunk))) add_chunk_gradients(chunk, last_compute_);
    }
    add_optimizer();
    return std::move(out_);
  }

 private:
  // Appends an op on `stream`, built in place (a deep pipeline's program holds millions): the
  // reference lasts until the next append; *index is the op's index.
  ProgramOp& append(ProgramOpType type, StreamKind stream, int32_t* index) {
    *index = static_cast<int32_t>(out_.ops.size());
    last_on_[static_cast<int>(stream)] = *index;
    ProgramOp& op = out_.ops.emplace_back();
    op.type = type;
    op.stream = stream;
    return op;
  }

  ProgramOp& collective(CollectiveRole role, Collective c, GroupKind g, StreamKind s, double bytes, int32_t* index) {
    ProgramOp& op = append(ProgramOpType::kCollective, s, index);
    op.role = role;
    op.collective = c;
    op.group = g;
    op.bytes = bytes;
    op.sent_bytes = collective_bytes_per_rank(c, bytes, group_size_[static_cast<int>(g)]);
    return op;
  }

  // The TP collectives inside a compute op of `kind` on `chunk`: (bytes, sent bytes), summed over
  // the chunk's MoE and leading dense layers.
  std::pair<double, double> pass_tp_bytes(OpKind kind, int64_t chunk) const {
    const bool with_w = kind == OpKind::kBackward && !splits_weight_gradients(p_.schedule);
    const double dense = d(chunk_dense_layers(m_, p_, stage_, chunk)), rest = d(prog_.layers_of(stage_, chunk)) - dense;
    double bytes = 0, sent = 0;
    for (const auto& [layers, tp] : {std::pair{rest, tp_}, std::pair{dense, tp_dense_}}) {
      const TpTraffic& own = tp[static_cast<int>(kind)];
      const TpTraffic& w = tp[static_cast<int>(OpKind::kWeight)];
      bytes += layers * (own.count * own.bytes + (with_w ? w.count * w.bytes : 0.0));
      sent += layers * (own.sent_bytes + (with_w ? w.sent_bytes : 0.0));
    }
    return {bytes, sent};
  }

  // [weight gather] [receive] compute [send]; returns the compute op's index.
  int32_t add_pass(const PipelineOp& pass) {
    // Built in place below: a temporary OpWaits, stored piecemeal and read back whole, stalls
    // store forwarding (most of this function's time).
    int32_t gathered = -1, received = -1;
    const int64_t vs = virtual_stage(stage_, pass.chunk, p_.pp), last_vs = p_.pp * p_.virtual_stages - 1;
    // ZeRO-3 gathers the chunk's weights before each pass: over DP, and with offload from host
    // memory too (its shard, even on one GPU).
    // With EP the experts gather over their own data-parallel ranks, after the dense weights on
    // the same stream. Every framework gathers per unit (a transformer layer: Megatron-FSDP's
    // TransformerLayer, FSDP2's block, DeepSpeed's modules within its prefetch bucket) while the
    // previous unit computes, one unit ahead at most: the gathers start with the previous pass's
    // last unit, and the pass waits for its first unit's share of the first gather only; the rest
    // streams in beneath it, ahead of the next pass's gathers on the same stream.
    if (p_.zero == 3 && pass.kind != OpKind::kWeight) {
      const float previous_unit = last_compute_ < 0 ? 1.0f : first_unit(out_.ops[last_compute_].chunk);
      auto gather = [&](CollectiveRole role, GroupKind group, double bytes) {
        int32_t id;
        ProgramOp& g = collective(role, Collective::kAllGather, group, StreamKind::kDp, bytes, &id);
        g.pass = pass.kind, g.micro_batch = pass.micro_batch, g.chunk = pass.chunk;
        if (last_compute_ >= 0) g.waits_for.push_back(last_compute_), g.first_wait_fraction = previous_unit < 1 ? 1 - previous_unit : 1;
        if (gathered < 0) gathered = id;
      };
      const ChunkBytes& b = chunk_bytes_[static_cast<size_t>(pass.chunk)];
      if (p_.data_ranks() > 1 || p_.offload) gather(CollectiveRole::kWeightGather, GroupKind::kDp, b.weights);
      if (expert_weight_bytes_ > 0 && p_.expert_data_ranks() > 1)
        gather(CollectiveRole::kExpertWeights, GroupKind::kExpertDp, b.expert_weights);
    }
    const bool needs_input = pass.kind == OpKind::kForward ? vs > 0 : pass.kind == OpKind::kBackward && vs < last_vs;
    if (needs_input) {
      ProgramOp& r = append(ProgramOpType::kRecv, StreamKind::kPpRecv, &received);
      r.pass = pass.kind, r.micro_batch = pass.micro_batch, r.chunk = pass.chunk;
      r.peer = static_cast<int32_t>((pass.kind == OpKind::kForward ? vs - 1 : vs + 1) % p_.pp);
      r.bytes = prog_.boundary_bytes;
      if (last_compute_ >= 0) r.waits_for.push_back(last_compute_);  // posted once the previous op is done
    }
    ProgramOp& c = append(ProgramOpType::kCompute, StreamKind::kCompute, &last_compute_);
    c.pass = pass.kind, c.micro_batch = pass.micro_batch, c.chunk = pass.chunk;
    const auto& [bytes, sent] = pass_tp_[static_cast<size_t>(pass.chunk * 3 + static_cast<int>(pass.kind))];
    c.bytes = bytes, c.sent_bytes = sent;
    if (gathered >= 0) c.waits_for.push_back(gathered), c.first_wait_fraction = first_unit(pass.chunk);
    for (int32_t w : blocking_) c.waits_for.push_back(w);
    blocking_.clear();
    if (received >= 0) c.waits_for.push_back(received);
    c.frees_activations = releases_activations(pass.kind, p_.schedule);
    const int64_t to = send_target(p_, pass.kind, pass.chunk, stage_);
    if (to >= 0) {
      int32_t id;
      ProgramOp& snd = append(ProgramOpType::kSend, StreamKind::kPpSend, &id);
      snd.pass = pass.kind, snd.micro_batch = pass.micro_batch, snd.chunk = pass.chunk;
      snd.peer = static_cast<int32_t>(to % p_.pp);
      snd.bytes = snd.sent_bytes = prog_.boundary_bytes;
      snd.waits_for.push_back(last_compute_);
      if (!p_.execution.overlap_p2p) blocking_.push_back(id);  // Megatron's blocking send/recv pairs
    }
    return last_compute_;
  }

  // The share of a pass over `chunk` that its first ZeRO unit (one layer) takes.
  float first_unit(int64_t chunk) const { return static_cast<float>(1.0 / d(std::max<int64_t>(prog_.layers_of(stage_, chunk), 1))); }

  // TP with SP: the norm weights saw only this rank's tokens; their gradients are summed over TP.
  // `after_fraction`: as a shard reduction, it starts with the pass's first unit (below).
  int32_t add_norm_gradients(int64_t chunk, int32_t micro_batch, int32_t after, float after_fraction = 1,
                             StreamKind stream = StreamKind::kDp) {
    const LayerParams lp = layer_params(m_);
    const bool last = virtual_stage(stage_, chunk, p_.pp) == p_.pp * p_.virtual_stages - 1;
    const double params = d(prog_.layers_of(stage_, chunk)) * d(lp.replicated) + (last ? d(edge_params(m_).final_norm) : 0.0);
    int32_t id;
    ProgramOp& n = collective(CollectiveRole::kNormGradients, Collective::kAllReduce, GroupKind::kTp, stream,
                              params * bytes_per_param(p_).gradients, &id);
    n.chunk = static_cast<int32_t>(chunk), n.micro_batch = micro_batch;
    n.waits_for.push_back(after);
    n.first_wait_fraction = after_fraction;
    return id;
  }

  bool sp_norms() const { return p_.sequence_parallel && p_.tp > 1; }

  // Hybrid sharding: the shard reduce-scattered by op `rs` is all-reduced over the replicas.
  // Returns the op the reduction ends with.
  int32_t add_replica_reduce(int32_t rs) {
    if (!p_.hybrid_sharding()) return rs;
    const ProgramOp from = out_.ops[rs];  // a copy: appending may move the ops
    int32_t id;
    ProgramOp& r = collective(CollectiveRole::kReplicaReduce, Collective::kAllReduce, GroupKind::kDpReplica,
                              StreamKind::kDp, from.bytes / d(p_.shard_degree()), &id);
    r.micro_batch = from.micro_batch, r.chunk = from.chunk, r.bucket = from.bucket;
    r.waits_for.push_back(rs);
    return id;
  }

  // ZeRO-2/3: each releasing op's gradients are reduce-scattered into the shards right away, unit
  // by unit as the backward leaves it (FSDP's post-backward hooks, DeepSpeed's overlap_comm
  // buckets): the reductions start once the pass's first unit is done and run beneath the rest.
  // The SP norms' all-reduce goes first on the same stream.
  void add_shard_reduction(const PipelineOp& pass, int32_t compute) {
    const float unit = first_unit(pass.chunk);
    if (sp_norms()) add_norm_gradients(pass.chunk, pass.micro_batch, compute, unit);
    int32_t id;
    const ChunkBytes& b = chunk_bytes_[static_cast<size_t>(pass.chunk)];
    ProgramOp& rs = collective(CollectiveRole::kGradientShard, Collective::kReduceScatter, GroupKind::kDp,
                               StreamKind::kDp, b.grads, &id);
    rs.micro_batch = pass.micro_batch, rs.chunk = pass.chunk;
    rs.waits_for = {compute};
    rs.first_wait_fraction = unit;
    id = add_replica_reduce(id);
    if (expert_grad_bytes_ > 0 && p_.expert_data_ranks() > 1) {  // EP: the experts over their own ranks
      // after the dense reduction on the same stream
      ProgramOp& e = collective(CollectiveRole::kExpertGradients, Collective::kReduceScatter, GroupKind::kExpertDp,
                                StreamKind::kDp, b.expert_grads, &id);
      e.micro_batch = pass.micro_batch, e.chunk = pass.chunk;
      e.waits_for = {compute};
      e.first_wait_fraction = unit;
    }
    if (!p_.execution.overlap_grad_reduce) blocking_.push_back(id);
  }

  // With tied embeddings (or multi-token prediction) over a pipeline, the first and the last
  // virtual stage each hold the embedding; its gradient is summed over the two.
  bool ties_embedding(int64_t chunk) const {
    const int64_t vs = virtual_stage(stage_, chunk, p_.pp);
    return last_stage_holds_embedding(m_, p_) && (vs == 0 || vs == p_.pp * p_.virtual_stages - 1);
  }
  // ZeRO-2/3 (gradients reduce-scattered after each pass): the runtimes keep the tied embedding's
  // gradient aside until this op, then reduce it into the shards.
  int32_t add_embedding_gradients(int32_t after, int64_t chunk) {
    const double bytes = d(edge_params(m_).token_embedding) / d(p_.tp) * bytes_per_param(p_).gradients;
    int32_t id;
    ProgramOp& e = collective(CollectiveRole::kEmbedding, Collective::kAllReduce, GroupKind::kEmbedding, StreamKind::kDp, bytes, &id);
    e.chunk = static_cast<int32_t>(chunk);
    e.waits_for.push_back(after);
    return id;
  }

  // A chunk's gradients are complete after op `producer`: SP norms, the tied embedding, then its
  // DP buckets, each waiting for its share of the producer's layers. The norms' all-reduce goes on
  // the TP stream: waiting for the whole producer, on the DP stream it would hold every bucket
  // behind it (Megatron all-reduces them after finish_grad_sync, the buckets long under way).
  void add_chunk_gradients(int64_t chunk, int32_t producer) {
    std::vector<int32_t> prior;
    if (sp_norms()) prior.push_back(add_norm_gradients(chunk, -1, producer, 1, StreamKind::kTp));
    if (ties_embedding(chunk)) prior.push_back(add_embedding_gradients(producer, chunk));
    if (p_.data_ranks() < 2) return;
    const Collective c = p_.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
    int32_t id;
    if (expert_grad_bytes_ > 0 && p_.expert_data_ranks() > 1) {  // EP: the experts' own reduction first
      ProgramOp& b = collective(CollectiveRole::kExpertGradients, c, GroupKind::kExpertDp, StreamKind::kDp,
                                expert_grad_bytes_ / d(p_.virtual_stages), &id);
      b.chunk = static_cast<int32_t>(chunk);
      b.waits_for.push_back(producer);
    }
    for (int64_t k = 0; k < buckets_; ++k) {
      ProgramOp& b = collective(CollectiveRole::kGradientBucket, c, GroupKind::kDp, StreamKind::kDp,
                                stage_grad_bytes_ / d(p_.virtual_stages) / d(buckets_), &id);
      b.chunk = static_cast<int32_t>(chunk), b.bucket = static_cast<int32_t>(chunk * buckets_ + k);
      b.waits_for.push_back(producer);
      b.first_wait_fraction = p_.execution.overlap_grad_reduce ? static_cast<float>(d(k + 1) / d(buckets_)) : 1.0f;
      if (k == buckets_ - 1)
        for (int32_t op : prior) b.waits_for.push_back(op);
      if (p_.zero >= 1) add_replica_reduce(id);
    }
  }

  void add_optimizer() {
    const int32_t tp = last_on_[static_cast<int>(StreamKind::kTp)], send = last_on_[static_cast<int>(StreamKind::kPpSend)],
                  dp = last_on_[static_cast<int>(StreamKind::kDp)];
    int32_t opt;
    ProgramOp& o = append(ProgramOpType::kOptimizer, StreamKind::kCompute, &opt);
    for (int32_t w : {tp, send, dp})
      if (w >= 0) o.waits_for.push_back(w);
    if (!p_.execution.overlap_param_gather) add_weight_gathers(opt);
  }

  // ZeRO-1/2: the updated weight shards all-gathered per bucket, after the optimizer (`after`), or
  // with overlap_param_gather (after = -1) at the start of the step, the previous optimizer's
  // gathers running under the forward: the first pass waits for the first bucket only.
  void add_weight_gathers(int32_t after) {
    if (p_.data_ranks() < 2 || (p_.zero != 1 && p_.zero != 2)) return;
    if (expert_weight_bytes_ > 0 && p_.expert_data_ranks() > 1) {
      int32_t id;
      ProgramOp& g = collective(CollectiveRole::kExpertWeights, Collective::kAllGather, GroupKind::kExpertDp,
                                StreamKind::kDp, expert_weight_bytes_, &id);
      if (after >= 0) g.waits_for.push_back(after);
    }
    const int64_t total = p_.virtual_stages * buckets_;
    for (int64_t k = 0; k < total; ++k) {
      int32_t id;
      ProgramOp& g = collective(CollectiveRole::kWeightBucket, Collective::kAllGather, GroupKind::kDp, StreamKind::kDp,
                                stage_weight_bytes_ / d(total), &id);
      g.bucket = static_cast<int32_t>(k);
      if (after >= 0) g.waits_for.push_back(after);
      if (after < 0 && k == 0) blocking_.push_back(id);
    }
  }

  const ModelSpec& m_;
  const Plan& p_;
  const StepProgram& prog_;
  const int64_t stage_, buckets_;
  double stage_grad_bytes_ = 0, stage_weight_bytes_ = 0;    // dense (all, without EP)
  double expert_grad_bytes_ = 0, expert_weight_bytes_ = 0;  // EP: the experts'
  struct ChunkBytes {
    double weights = 0, grads = 0, expert_weights = 0, expert_grads = 0;
  };
  std::vector<ChunkBytes> chunk_bytes_;  // per chunk, as the stage's above
  TpTraffic tp_[3], tp_dense_[3];
  int64_t group_size_[kGroupKinds] = {};
  std::vector<std::pair<double, double>> pass_tp_;  // pass_tp_bytes by (chunk, pass)
  StageProgram out_;
  int32_t last_compute_ = -1;
  int32_t last_on_[5] = {-1, -1, -1, -1, -1};
  OpWaits blocking_;  // ops the next compute op waits for (blocking sends, reductions)
};

}  // namespace

StepProgram build_step_program(const ModelSpec& m, const Plan& plan) {
  StepProgram prog{plan, RankGrid(plan), {}, 0, {}, {}};
  prog.boundary_bytes = boundary_tensor_bytes(m, plan) / d(plan.tp);  // Megatron's scatter-gather: 1/t per TP rank
  const ActivationOptions ao = activation_options(plan);
  const double layer = layer_activation_bytes(m, ao).total(), dense = layer_activation_bytes(dense_layer_model(m), ao).total();
  for (int64_t s = 0; s < plan.pp; ++s) {
    for (int64_t c = 0; c < plan.virtual_stages; ++c) {
      const int64_t layers = plan.chunk_layers(m.layers, s, c).count;
      const double n = d(chunk_dense_layers(m, plan, s, c));
      prog.chunk_layers.push_back(layers);
      prog.pass_activation_bytes.push_back((d(layers) - n) * layer + n * dense);
    }
  }
  std::vector<std::vector<PipelineOp>> schedule =
      pipeline_ops(plan.schedule, plan.pp, plan.micro_batches(), plan.virtual_stages);
  for (int64_t s = 0; s < plan.pp; ++s) prog.stages.push_back(StageBuilder(m, prog, s).build(std::move(schedule[s])));
  return prog;
}

}  // namespace parallax
