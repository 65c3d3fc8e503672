#include "planner/lowering.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

namespace parallax {

namespace {

// Where a transfer arrives: (receiving stage, pass, micro-batch, receiving chunk).
using TransferKey = std::tuple<int64_t, int, int32_t, int64_t>;

class Lowerer {
 public:
  Lowerer(const ModelSpec& m, const Plan& plan, const OpCosts& costs)
      : costs_(costs), p_(plan) {
    out_.program = build_step_program(m, plan);
  }

  LoweredStep run() {
    const auto& stages = out_.program.stages;
    size_t ops = 0;
    for (const StageProgram& sp : stages) ops += sp.ops.size();
    out_.graph.reserve(ops + 64 * stages.size(), 2 * ops);
    for (size_t s = 0; s < stages.size(); ++s) {
      for (StreamKind k : kAllStreams) streams_[s][static_cast<int>(k)] = out_.graph.add_stream(static_cast<int32_t>(s), k);
      out_.compute_stream.push_back(streams_[s][0]);
    }
    for (size_t s = 0; s < stages.size(); ++s) add_tasks(static_cast<int64_t>(s));
    for (size_t s = 0; s < stages.size(); ++s) add_dependencies(static_cast<int64_t>(s));
    return std::move(out_);
  }

 private:
  // The fractions at which later ops wait for op i (a DP bucket waits for its layers' share).
  std::vector<std::vector<double>> cuts(const StageProgram& sp) const {
    std::vector<std::vector<double>> at(sp.ops.size());
    for (const ProgramOp& op : sp.ops)
      if (!op.waits_for.empty() && op.first_wait_fraction < 1) at[op.waits_for[0]].push_back(op.first_wait_fraction);
    for (auto& v : at) std::sort(v.begin(), v.end());
    return at;
  }

  void add_tasks(int64_t s) {
    const StageProgram& sp = out_.program.stages[s];
    const std::vector<std::vector<double>> at = cuts(sp);
    std::vector<TaskId>& first = out_.first_task.emplace_back(sp.ops.size(), -1);
    std::vector<TaskId>& last = out_.last_task.emplace_back(sp.ops.size(), -1);
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      if (op.type == ProgramOpType::kRecv) continue;  // the sender's transfer task
      const double dur = costs_.duration_s(op, s);
      const StreamId stream = streams_[s][static_cast<int>(op.stream)];
      double done = 0;
      for (double f : at[i]) {  // pieces up to each cut, then the rest
        if (f <= done) continue;
        const TaskId t = out_.graph.add_task(stream, dur * (f - done), static_cast<int32_t>(i));
        if (first[i] < 0) first[i] = t;
        pieces_[{s, i}].push_back({f, t});
        done = f;
      }
      last[i] = out_.graph.add_task(stream, dur * (1 - done), static_cast<int32_t>(i));
      if (first[i] < 0) first[i] = last[i];
      if (op.type == ProgramOpType::kSend) {
        const int64_t to = send_target(p_, op.pass, op.chunk, s);
        transfers_[{to % p_.pp, static_cast<int>(op.pass), op.micro_batch, to / p_.pp}] = last[i];
      }
    }
  }

  // The task whose end op `w` of stage `s` must reach for a waiter: its piece at `fraction`.
  TaskId end_of(int64_t s, int32_t w, double fraction) const {
    if (fraction < 1) {
      auto it = pieces_.find({s, static_cast<size_t>(w)});
      if (it != pieces_.end())
        for (const auto& [f, t] : it->second)
          if (f >= fraction) return t;
    }
    return out_.last_task[s][w];
  }

  void add_dependencies(int64_t s) {
    StageProgram& sp = out_.program.stages[s];
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      if (op.type == ProgramOpType::kRecv) {  // resolve the transfer
        const TaskId t = transfers_.at({s, static_cast<int>(op.pass), op.micro_batch, op.chunk});
        out_.first_task[s][i] = out_.last_task[s][i] = t;
        continue;  // the transfer starts with its producer: sends are eager (NCCL's buffers take them)
      }
      for (size_t k = 0; k < op.waits_for.size(); ++k) {
        const int32_t w = op.waits_for[k];
        const TaskId before = sp.ops[w].type == ProgramOpType::kRecv
                                  ? transfers_.at({s, static_cast<int>(sp.ops[w].pass), sp.ops[w].micro_batch, sp.ops[w].chunk})
                                  : end_of(s, w, k == 0 ? op.first_wait_fraction : 1.0);
        out_.graph.add_dependency(before, out_.first_task[s][i]);
      }
    }
  }

  const OpCosts& costs_;
  const Plan& p_;
  LoweredStep out_;
  std::map<int64_t, std::array<StreamId, 5>> streams_;
  std::map<TransferKey, TaskId> transfers_;
  std::map<std::pair<int64_t, size_t>, std::vector<std::pair<double, TaskId>>> pieces_;
};

}  // namespace

LoweredStep lower_step(const ModelSpec& m, const Plan& plan, const OpCosts& costs) {
  return Lowerer(m, plan, costs).run();
}

}  // namespace parallax
