#include "planner/lowering.h"

#include <algorithm>
#include <cmath>

#include "planner/memory_model.h"
#include "simulator/collective_cost.h"
#include "simulator/compute_cost.h"

namespace parallax {

namespace {

double d(int64_t x) { return static_cast<double>(x); }
constexpr int64_t kMaxBuckets = 64;  // keeps the task count bounded for very large stages

class Lowerer {
 public:
  Lowerer(const ModelSpec& m, const ClusterSpec& c, const Plan& p)
      : m_(m), c_(c), p_(p), mbs_(p.micro_batches()), v_(p.virtual_stages), last_vs_(p.pp * p.virtual_stages - 1) {
    out_.layer = layer_timing(m, c, p);
    out_.edge = edge_timing(m, c, p);
    const double layers = d(p.layers_per_chunk(m.layers));
    out_.ops = pipeline_ops(p.schedule, p.pp, mbs_, v_, layers * out_.layer.forward_s,
                            layers * out_.layer.backward_input_s, layers * out_.layer.backward_weight_s);
    const ActivationOptions ao{p.seq_len, p.micro_batch, p.tp, p.sequence_parallel, p.recompute, p.execution.attention};
    out_.activation_bytes_per_pass = d(p.layers_per_chunk(m.layers)) * layer_activation_bytes(m, ao).total();
    p2p_ = pipeline_transfer(m, c, p);
    out_.blocking_send_s = p.execution.overlap_p2p ? 0.0 : p2p_.time_s;
    out_.send_bytes = p2p_.bytes;
    pp_link_ = group_link(c, place_group(p.pp, p.tp * p.dp, c.node.gpus));
    dp_link_ = group_link(c, place_group(p.dp, p.tp, c.node.gpus));
  }

  LoweredStep run() {
    TaskGraph& g = out_.graph;
    size_t ops = 0;
    for (const auto& stage : out_.ops) ops += stage.size();
    g.reserve(2 * ops + 64 * static_cast<size_t>(p_.pp), 3 * ops + 64 * static_cast<size_t>(p_.pp));
    for (int64_t s = 0; s < p_.pp; ++s) {
      const int32_t r = static_cast<int32_t>(s);
      out_.compute_stream.push_back(g.add_stream(r, StreamKind::kCompute));
      send_.push_back(g.add_stream(r, StreamKind::kPpSend));
      dp_.push_back(g.add_stream(r, StreamKind::kDp));
    }
    for (int64_t s = 0; s < p_.pp; ++s) add_compute(s);
    for (int64_t s = 0; s < p_.pp; ++s) add_transfers(s);
    for (int64_t s = 0; s < p_.pp; ++s) add_data_parallel(s);
    return std::move(out_);
  }

 private:
  size_t key(OpKind k, int64_t mb, int64_t chunk) const {
    return (static_cast<size_t>(k) * mbs_ + mb) * v_ + chunk;
  }

  double op_duration(const PipelineOp& op, int64_t stage) const {
    return compute_duration(op, stage) + (send_target(p_, op, stage) >= 0 ? out_.blocking_send_s : 0.0);
  }

  double compute_duration(const PipelineOp& op, int64_t stage) const {
    const LayerTiming& lt = out_.layer;
    const EdgeTiming& et = out_.edge;
    const int64_t vs = virtual_stage(stage, op.chunk, p_.pp);
    const bool first = vs == 0, last = vs == last_vs_, split = splits_weight_gradients(p_.schedule);
    const double layers = d(p_.layers_per_chunk(m_.layers));
    switch (op.kind) {
      case OpKind::kForward:
        return layers * lt.forward_s + (first ? et.first_forward_s : 0) + (last ? et.last_forward_s : 0) +
               p_.execution.microbatch_overhead_us * 1e-6;
      case OpKind::kBackward:
        return layers * (lt.backward_input_s + (split ? 0 : lt.backward_weight_s)) +
               (first ? et.first_backward_s : 0) +
               (last ? et.last_backward_input_s + (split ? 0 : et.last_backward_weight_s) : 0);
      case OpKind::kWeight: return layers * lt.backward_weight_s + (last ? et.last_backward_weight_s : 0);
    }
    return 0;
  }

  // The op after which a chunk's weight gradients are complete: its last B (or W).
  std::vector<size_t> final_backward_per_chunk(int64_t stage) const {
    const OpKind release = splits_weight_gradients(p_.schedule) ? OpKind::kWeight : OpKind::kBackward;
    std::vector<size_t> last(v_, 0);
    const auto& ops = out_.ops[stage];
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == release) last[ops[i].chunk] = i;
    return last;
  }

  void add_compute(int64_t s) {
    TaskGraph& g = out_.graph;
    const auto& ops = out_.ops[s];
    std::vector<size_t> final_bwd = final_backward_per_chunk(s);
    index_.emplace_back(3 * mbs_ * v_, -1);
    first_index_.emplace_back(3 * mbs_ * v_, -1);
    out_.op_tasks.emplace_back();
    out_.op_first_tasks.emplace_back();
    pieces_.emplace_back(v_);
    const int64_t buckets = overlapped() ? bucket_count(s) : 1;
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipelineOp& op = ops[i];
      const TaskLabel label{static_cast<TaskKind>(op.kind), op.micro_batch, op.chunk};
      const double compute = compute_duration(op, s), tail = op_duration(op, s) - compute;
      const bool slice = buckets > 1 && i == final_bwd[op.chunk];
      TaskId t = -1;
      // The last backward of a chunk is cut into one piece per gradient bucket, so each bucket's
      // reduction can start when its layers' gradients exist; a blocking send stays at the end.
      pieces_[s][op.chunk].clear();
      const int64_t n = slice ? buckets : 1;
      for (int64_t k = 0; k < n; ++k) {
        t = g.add_task(out_.compute_stream[s], compute / d(n) + (k == n - 1 ? tail : 0.0), label);
        pieces_[s][op.chunk].push_back(t);
      }
      const TaskId first = t - static_cast<TaskId>(n - 1);
      index_[s][key(op.kind, op.micro_batch, op.chunk)] = t;
      first_index_[s][key(op.kind, op.micro_batch, op.chunk)] = first;
      out_.op_tasks[s].push_back(t);
      out_.op_first_tasks[s].push_back(first);
    }
  }

  TaskId task_of(int64_t stage, OpKind k, int64_t mb, int64_t chunk) const { return index_[stage][key(k, mb, chunk)]; }

  void add_transfers(int64_t s) {
    TaskGraph& g = out_.graph;
    for (const PipelineOp& op : out_.ops[s]) {
      const int64_t to = send_target(p_, op, s);
      if (to < 0) continue;
      const TaskId producer = task_of(s, op.kind, op.micro_batch, op.chunk);
      const TaskId consumer = first_index_[to % p_.pp][key(op.kind, op.micro_batch, to / p_.pp)];
      if (!p_.execution.overlap_p2p) {  // the transfer ends with the producer
        g.add_dependency(producer, consumer);
        continue;
      }
      const TaskKind kind = op.kind == OpKind::kForward ? TaskKind::kSendForward : TaskKind::kSendBackward;
      const TaskId send = g.add_task(send_[s], p2p_.time_s, {kind, op.micro_batch, op.chunk}, p2p_.bytes);
      g.add_dependency(producer, send);
      g.add_dependency(send, consumer);
    }
  }

  bool overlapped() const { return p_.dp > 1 && p_.execution.overlap_grad_reduce && p_.zero <= 1; }

  double grad_bytes(int64_t s) const {
    return stage_params_per_gpu(m_, p_, s) * bytes_per_param(p_).gradients;
  }
  double weight_bytes(int64_t s) const {
    return stage_params_per_gpu(m_, p_, s) * bytes_per_param(p_).weights;
  }
  int64_t bucket_count(int64_t s) const {
    const double bucket = p_.execution.dp_bucket_mib * 1048576.0;
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(grad_bytes(s) / d(v_) / bucket)), 1, kMaxBuckets);
  }

  // DP reduction of each chunk's gradients in buckets, then the optimizer, then (ZeRO-1/2) the
  // all-gather of updated weights.
  void add_data_parallel(int64_t s) {
    TaskGraph& g = out_.graph;
    std::vector<TaskId> before_optimizer;
    if (p_.dp > 1 && p_.zero == 3) before_optimizer = add_zero3(s);
    if (p_.dp > 1 && p_.zero == 2) before_optimizer = add_zero2_reductions(s);
    if (p_.dp > 1 && p_.zero <= 1) before_optimizer = add_bucketed_reduction(s);
    const TaskId opt = add_optimizer(s);
    for (TaskId t : before_optimizer) g.add_dependency(t, opt);
    g.add_dependency(out_.op_tasks[s].back(), opt);
    if (p_.dp > 1 && (p_.zero == 1 || p_.zero == 2)) {
      const int64_t buckets = bucket_count(s);
      const double bytes = weight_bytes(s) / d(buckets);
      for (int64_t k = 0; k < buckets; ++k) {
        const TaskId ag = g.add_task(dp_[s], collective_time_s(Collective::kAllGather, bytes, p_.dp, dp_link_),
                                     {TaskKind::kDpAllGather, -1, -1, static_cast<int32_t>(k)},
                                     collective_bytes_per_rank(Collective::kAllGather, bytes, p_.dp));
        g.add_dependency(opt, ag);
      }
    }
  }

  std::vector<TaskId> add_bucketed_reduction(int64_t s) {
    TaskGraph& g = out_.graph;
    const Collective op = p_.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
    const TaskKind kind = p_.zero == 0 ? TaskKind::kDpAllReduce : TaskKind::kDpReduceScatter;
    const int64_t buckets = bucket_count(s);
    const double bytes = grad_bytes(s) / d(v_) / d(buckets);
    std::vector<TaskId> out;
    int32_t index = 0;
    // Chunks finish their backward in reverse order; reduce them in that order.
    for (int64_t chunk = v_ - 1; chunk >= 0; --chunk) {
      const std::vector<TaskId>& piece = pieces_[s][chunk];
      for (int64_t k = 0; k < buckets; ++k) {
        const TaskId t = g.add_task(dp_[s], collective_time_s(op, bytes, p_.dp, dp_link_), {kind, -1, -1, index++},
                                    collective_bytes_per_rank(op, bytes, p_.dp));
        g.add_dependency(overlapped() ? piece[std::min<size_t>(k, piece.size() - 1)] : out_.op_tasks[s].back(), t);
        out.push_back(t);
      }
    }
    return out;
  }

  // ZeRO-2: each micro-batch's gradients are reduce-scattered into the shards after its backward.
  std::vector<TaskId> add_zero2_reductions(int64_t s) {
    TaskGraph& g = out_.graph;
    std::vector<TaskId> out;
    const double bytes = grad_bytes(s);
    for (size_t i = 0; i < out_.ops[s].size(); ++i) {
      const PipelineOp& op = out_.ops[s][i];
      if (op.kind != (splits_weight_gradients(p_.schedule) ? OpKind::kWeight : OpKind::kBackward)) continue;
      const TaskId t = g.add_task(dp_[s], collective_time_s(Collective::kReduceScatter, bytes, p_.dp, dp_link_),
                                  {TaskKind::kDpReduceScatter, op.micro_batch, op.chunk, static_cast<int32_t>(i)},
                                  collective_bytes_per_rank(Collective::kReduceScatter, bytes, p_.dp));
      g.add_dependency(out_.op_tasks[s][i], t);
      block_next_op(s, i, t);
      out.push_back(t);
    }
    return out;
  }

  // Without overlap the reduction runs on the compute stream's critical path: the next op waits.
  void block_next_op(int64_t s, size_t op_index, TaskId reduction) {
    if (p_.execution.overlap_grad_reduce || op_index + 1 >= out_.op_tasks[s].size()) return;
    out_.graph.add_dependency(reduction, out_.op_first_tasks[s][op_index + 1]);
  }

  // ZeRO-3: the weights are gathered before every F and B (prefetched while the previous op
  // computes) and each backward's gradients reduce-scattered after it.
  std::vector<TaskId> add_zero3(int64_t s) {
    TaskGraph& g = out_.graph;
    const auto& ops = out_.ops[s];
    const double ag_s = collective_time_s(Collective::kAllGather, weight_bytes(s), p_.dp, dp_link_);
    const double ag_bytes = collective_bytes_per_rank(Collective::kAllGather, weight_bytes(s), p_.dp);
    const OpKind release = splits_weight_gradients(p_.schedule) ? OpKind::kWeight : OpKind::kBackward;
    std::vector<TaskId> out;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::kWeight) continue;
      const TaskId ag = g.add_task(dp_[s], ag_s, {TaskKind::kDpAllGather, ops[i].micro_batch, ops[i].chunk,
                                                  static_cast<int32_t>(i)}, ag_bytes);
      if (i >= 2) g.add_dependency(out_.op_tasks[s][i - 2], ag);  // at most one gathered copy ahead
      g.add_dependency(ag, out_.op_first_tasks[s][i]);
      if (i >= 1 && ops[i - 1].kind == release) out.push_back(add_zero3_scatter(s, i - 1));
    }
    if (ops.back().kind == release) out.push_back(add_zero3_scatter(s, ops.size() - 1));
    return out;
  }

  TaskId add_zero3_scatter(int64_t s, size_t op_index) {
    TaskGraph& g = out_.graph;
    const PipelineOp& op = out_.ops[s][op_index];
    const double bytes = grad_bytes(s);
    const TaskId rs = g.add_task(dp_[s], collective_time_s(Collective::kReduceScatter, bytes, p_.dp, dp_link_),
                                 {TaskKind::kDpReduceScatter, op.micro_batch, op.chunk, static_cast<int32_t>(op_index)},
                                 collective_bytes_per_rank(Collective::kReduceScatter, bytes, p_.dp));
    g.add_dependency(out_.op_tasks[s][op_index], rs);
    block_next_op(s, op_index, rs);
    return rs;
  }

  TaskId add_optimizer(int64_t s) {
    const double dur = optimizer_step_s(c_, p_, stage_params_per_gpu(m_, p_, s));
    const TaskId t = out_.graph.add_task(out_.compute_stream[s], dur + p_.execution.step_overhead_us * 1e-6,
                                         {p_.offload ? TaskKind::kOffload : TaskKind::kOptimizer});
    out_.optimizer.push_back(t);
    return t;
  }

  const ModelSpec& m_;
  const ClusterSpec& c_;
  const Plan& p_;
  const int64_t mbs_, v_, last_vs_;
  P2pCost p2p_;
  LinkTier pp_link_, dp_link_;
  LoweredStep out_;
  std::vector<StreamId> send_, dp_;
  std::vector<std::vector<TaskId>> index_, first_index_;  // an op's last and first task
  std::vector<std::vector<std::vector<TaskId>>> pieces_;  // per stage, per chunk: last backward's pieces
};

}  // namespace

int64_t send_target(const Plan& plan, const PipelineOp& op, int64_t stage) {
  const int64_t vs = virtual_stage(stage, op.chunk, plan.pp), last = plan.pp * plan.virtual_stages - 1;
  if (op.kind == OpKind::kForward && vs < last) return vs + 1;
  if (op.kind == OpKind::kBackward && vs > 0) return vs - 1;
  return -1;
}

LoweredStep lower_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  return Lowerer(m, c, plan).run();
}

}  // namespace parallax
