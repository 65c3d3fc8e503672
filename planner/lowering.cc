#include "planner/lowering.h"

#include <algorithm>
#include <array>

namespace parallax {

namespace {

class Lowerer {
 public:
  Lowerer(const ModelSpec& m, const Plan& plan, const OpCosts& costs)
      : costs_(costs), p_(plan), micro_batches_(plan.micro_batches()),
        transfers_(static_cast<size_t>(2 * plan.pp * micro_batches_ * plan.virtual_stages), -1) {
    out_.program = build_step_program(m, plan);
    if (!plan.execution.overlap_p2p) {
      ProgramOp send;
      send.type = ProgramOpType::kSend;
      out_.folded_send_s = costs.duration_s(send, 0);
    }
  }

  LoweredStep run() {
    const auto& stages = out_.program.stages;
    size_t ops = 0;
    for (const StageProgram& sp : stages) ops += sp.ops.size();
    out_.graph.reserve(ops + 64 * stages.size(), 2 * ops);
    streams_.resize(stages.size());
    out_.first_task.reserve(stages.size());
    out_.last_task.reserve(stages.size());
    pieces_.reserve(stages.size());
    for (size_t s = 0; s < stages.size(); ++s) {
      for (StreamKind k : kAllStreams) streams_[s][static_cast<int>(k)] = out_.graph.add_stream(static_cast<int32_t>(s), k);
      out_.compute_stream.push_back(streams_[s][0]);
    }
    for (size_t s = 0; s < stages.size(); ++s) add_tasks(static_cast<int64_t>(s));
    for (size_t s = 0; s < stages.size(); ++s) add_dependencies(static_cast<int64_t>(s));
    return std::move(out_);
  }

 private:
  // Where a transfer arrives: (receiving stage, pass F or B, micro-batch, receiving chunk).
  size_t transfer(int64_t stage, OpKind pass, int64_t mb, int64_t chunk) const {
    return static_cast<size_t>(((stage * 2 + (pass == OpKind::kForward ? 0 : 1)) * micro_batches_ + mb) *
                                   p_.virtual_stages + chunk);
  }

  // The fractions at which later ops wait for op i (a DP bucket waits for its layers' share), or
  // none: a list of (op, fraction), sorted.
  std::vector<std::pair<int32_t, double>> cuts(const StageProgram& sp) const {
    std::vector<std::pair<int32_t, double>> at;
    for (const ProgramOp& op : sp.ops)
      if (!op.waits_for.empty() && op.first_wait_fraction < 1) at.push_back({op.waits_for[0], op.first_wait_fraction});
    std::sort(at.begin(), at.end());
    return at;
  }

  // With overlap_param_gather the previous step's ZeRO-1/2 weight gathers run under the first
  // forward of each chunk, one bucket ahead of its layers (Megatron's forward pre-hooks wait for
  // their bucket): the forward's last bucket of layers cannot start before the chunk's last
  // bucket has arrived. Per op: (the fraction of it where that tail starts, the gather), or -1;
  // empty when no forward is gated.
  std::vector<std::pair<double, int32_t>> gated(const StageProgram& sp) const {
    std::vector<std::pair<double, int32_t>> gate;
    if (!p_.execution.overlap_param_gather) return gate;
    std::vector<int32_t> buckets;  // the stage's weight buckets, in bucket order
    for (size_t i = 0; i < sp.ops.size(); ++i)
      if (sp.ops[i].role == CollectiveRole::kWeightBucket) buckets.push_back(static_cast<int32_t>(i));
    const size_t per_chunk = buckets.size() / static_cast<size_t>(p_.virtual_stages);
    if (per_chunk == 0) return gate;
    gate.assign(sp.ops.size(), {1.0, -1});
    std::vector<bool> seen(static_cast<size_t>(p_.virtual_stages), false);
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      if (op.type != ProgramOpType::kCompute || op.pass != OpKind::kForward || seen[static_cast<size_t>(op.chunk)]) continue;
      seen[static_cast<size_t>(op.chunk)] = true;
      gate[i] = {1.0 - 1.0 / static_cast<double>(per_chunk), buckets[(static_cast<size_t>(op.chunk) + 1) * per_chunk - 1]};
    }
    return gate;
  }

  void add_tasks(int64_t s) {
    const StageProgram& sp = out_.program.stages[s];
    const std::vector<std::pair<int32_t, double>> at = cuts(sp);
    const std::vector<std::pair<double, int32_t>> gate = gated(sp);
    auto cut = at.begin();
    std::vector<TaskId>& first = out_.first_task.emplace_back(sp.ops.size(), -1);
    std::vector<TaskId>& last = out_.last_task.emplace_back(sp.ops.size(), -1);
    std::vector<std::pair<int32_t, std::pair<double, TaskId>>>& pieces = pieces_.emplace_back();
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      if (op.type == ProgramOpType::kRecv) continue;  // the sender's transfer task
      if (op.type == ProgramOpType::kSend && out_.folded_send_s > 0) {  // the end of its producer
        first[i] = last[i] = last[op.waits_for[0]];
        register_transfer(op, s, last[i]);
        continue;
      }
      const double dur = duration_s(op, s);
      const float share = op.type == ProgramOpType::kCollective ? static_cast<float>(costs_.sm_share(op)) : 0.0f;
      const StreamId stream = streams_[s][static_cast<int>(op.stream)];
      double done = 0;
      const double gate_at = gate.empty() ? 1.0 : gate[i].first;
      const int32_t gate_op = gate.empty() ? -1 : gate[i].second;
      bool gate_pending = gate_op >= 0;
      auto piece = [&](double f) {  // the piece [done, f), which a gated tail starting there waits for
        const TaskId t = out_.graph.add_task(stream, dur * (f - done), static_cast<int32_t>(i), share);
        if (first[i] < 0) first[i] = t;
        if (gate_pending && done >= gate_at) out_.graph.add_dependency(last[gate_op], t), gate_pending = false;
        done = f;
        return t;
      };
      for (; cut != at.end() && cut->first == static_cast<int32_t>(i); ++cut) {  // pieces up to each cut, then the rest
        const double f = cut->second;
        if (f <= done) continue;
        if (gate_pending && done < gate_at && gate_at < f) piece(gate_at);
        pieces.push_back({static_cast<int32_t>(i), {f, piece(f)}});
      }
      if (gate_pending && done < gate_at) piece(gate_at);
      const double tail = op.type == ProgramOpType::kCompute && i + 1 < sp.ops.size() && sp.ops[i + 1].type == ProgramOpType::kSend
                              ? out_.folded_send_s : 0.0;  // folded_tail_s, without looking the stage up again
      last[i] = out_.graph.add_task(stream, dur * (1 - done) + tail, static_cast<int32_t>(i), share);
      if (first[i] < 0) first[i] = last[i];
      if (gate_pending) out_.graph.add_dependency(last[gate_op], last[i]);
      if (op.type == ProgramOpType::kSend) register_transfer(op, s, last[i]);
    }
  }

  // An op's duration; a collective's is remembered, for a stage issues runs of equal ones (its
  // gradient buckets and weight gathers).
  double duration_s(const ProgramOp& op, int64_t s) {
    if (op.type == ProgramOpType::kCompute) {  // OpCosts prices a pass by (stage, pass, chunk, overlap)
      if (compute_stage_ != s) compute_stage_ = s, compute_s_.assign(static_cast<size_t>(6 * p_.virtual_stages), -1.0);
      double& d = compute_s_[static_cast<size_t>((op.chunk * 3 + static_cast<int>(op.pass)) * 2 + op.exchange_overlapped)];
      if (d < 0) d = costs_.duration_s(op, s);
      return d;
    }
    if (op.type != ProgramOpType::kCollective) return costs_.duration_s(op, s);
    if (memo_stage_ != s || memo_.type != op.type || memo_.collective != op.collective || memo_.group != op.group ||
        memo_.role != op.role || memo_.bytes != op.bytes || memo_.chunk != op.chunk) {  // a ZeRO unit's size is per chunk
      memo_stage_ = s, memo_ = op;
      memo_s_ = costs_.duration_s(op, s);
    }
    return memo_s_;
  }

  void register_transfer(const ProgramOp& send, int64_t s, TaskId t) {
    const int64_t to = send_target(p_, send.pass, send.chunk, s);
    transfers_[transfer(to % p_.pp, send.pass, send.micro_batch, to / p_.pp)] = t;
  }

  // The task whose end op `w` of stage `s` must reach for a waiter: its piece at `fraction`.
  TaskId end_of(int64_t s, int32_t w, double fraction) const {
    if (fraction < 1) {
      const auto& pieces = pieces_[s];  // sorted by op, then fraction
      auto it = std::lower_bound(pieces.begin(), pieces.end(), std::pair<int32_t, std::pair<double, TaskId>>{w, {fraction, -1}});
      if (it != pieces.end() && it->first == w) return it->second.second;
    }
    return out_.last_task[s][w];
  }

  void add_dependencies(int64_t s) {
    StageProgram& sp = out_.program.stages[s];
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      if (op.type == ProgramOpType::kRecv) {  // resolve the transfer
        const TaskId t = transfers_[transfer(s, op.pass, op.micro_batch, op.chunk)];
        out_.first_task[s][i] = out_.last_task[s][i] = t;
        continue;  // the transfer starts with its producer: sends are eager (NCCL's buffers take them)
      }
      if (op.type == ProgramOpType::kSend && out_.folded_send_s > 0) continue;  // part of its producer
      for (size_t k = 0; k < op.waits_for.size(); ++k) {
        const int32_t w = op.waits_for[k];
        const TaskId before = sp.ops[w].type == ProgramOpType::kRecv
                                  ? transfers_[transfer(s, sp.ops[w].pass, sp.ops[w].micro_batch, sp.ops[w].chunk)]
                                  : end_of(s, w, k == 0 ? op.first_wait_fraction : 1.0);
        out_.graph.add_dependency(before, out_.first_task[s][i]);
      }
    }
  }

  const OpCosts& costs_;
  const Plan& p_;
  const int64_t micro_batches_;  // p_.micro_batches(), a division, looked up per transfer
  LoweredStep out_;
  std::vector<std::array<StreamId, 5>> streams_;  // per stage, by StreamKind
  int64_t compute_stage_ = -1;     // duration_s's compute passes of this stage, by (chunk, pass)
  std::vector<double> compute_s_;  // by (chunk, pass, exchange_overlapped)
  ProgramOp memo_;  // duration_s's last collective, its stage and duration
  int64_t memo_stage_ = -1;
  double memo_s_ = 0;
  std::vector<TaskId> transfers_;  // by transfer(): the sender's transfer task
  std::vector<std::vector<std::pair<int32_t, std::pair<double, TaskId>>>> pieces_;  // per stage: (op, (fraction, task))
};

}  // namespace

double LoweredStep::folded_tail_s(int64_t s, size_t i) const {
  const std::vector<ProgramOp>& ops = program.stages[s].ops;
  const bool folds = folded_send_s > 0 && ops[i].type == ProgramOpType::kCompute && i + 1 < ops.size() &&
                     ops[i + 1].type == ProgramOpType::kSend;
  return folds ? folded_send_s : 0.0;
}

LoweredStep lower_step(const ModelSpec& m, const Plan& plan, const OpCosts& costs) {
  return Lowerer(m, plan, costs).run();
}

}  // namespace parallax
