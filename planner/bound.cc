// step_lower_bound_s: two chains of work that every simulated step contains, priced by the same
// OpCosts the lowering prices its tasks by. Notation: stage s, chunk k, m micro-batches; f, b, w
// the durations of a forward, backward and (ZB-H1) weight-gradient pass of chunk k on stage s;
// hop the duration of one pipeline transfer; opt_s the optimizer of stage s.
//
// Facts of the simulation this rests on (planner/lowering.h, simulator/engine.h):
//  - a stream runs one task at a time, in program order; a compute task runs at rate <= 1 (NCCL
//    contention only slows it), so it lasts at least its duration;
//  - a transfer is a task of duration hop after its producer (overlap_p2p), or folded into the end
//    of the producer's task (blocking pairs); either way its consumer starts >= producer's compute
//    end + hop;
//  - a pass lasts at least its duration beside an opposite pass (execution.moe_a2a_overlap), which
//    a stage's first and last passes never run beside;
//  - every schedule (program/schedule.h) starts each stage with F of micro-batch 0 on chunk 0,
//    ends its passes with the backward of one micro-batch mu on chunk 0 — the same mu on every
//    stage (1F1B, ZB-H1, interleaved: m - 1; GPipe: 0) — followed only by ZB-H1's held-back
//    weight passes (at most s + 1 on stage s), and puts the optimizer after every pass.
//
// (1) Fill: stage s's first task, F(0, chunk 0), waits for F(0, chunk 0) on stages 0 .. s-1 and
//     each transfer: it starts no earlier than A_s = sum_{j<s} (f_j0 + hop). From there its
//     compute stream runs every pass (m sum_k (f + b + w), plus hop for each blocking send folded
//     into a pass) and then its optimizer: T >= A_s + work_s + opt_s. For equal stages at s = p-1
//     this is 1F1B's (m + p - 1)(f + b).
// (2) Drain: B(mu, 0) on stage s ends no earlier than A_s plus the passes up to it (its compute
//     alone: work_s less folds and the held-back W); then B(mu, 0) runs on stages s-1 .. 0 in turn,
//     each after a transfer, then stage 0's optimizer: T >= A_s + before_s + sum_{j<s} (hop + b_j0)
//     + opt_0.
// (3) Data-parallel stream: stage s's collectives run one at a time on its dp stream, each for its
//     whole duration (collectives are not slowed): T >= the sum of their durations. Those of a
//     pass (ZeRO-3's weight gathers, ZeRO-2/3's shard reductions with their replica, expert and SP
//     norm parts) are the same for every micro-batch, so the program of one micro-batch
//     (interleaved: of pp, the fewest it allows) prices them, times m over its count; the rest
//     (buckets, weight gathers, embedding) once a step. It costs a small program, so it is
//     computed only when (1) and (2) do not already exceed what the caller must beat.
// Sums of task pieces (a backward cut for DP buckets) round differently from the whole, so the
// bound is lowered by a part in 10^9.
#include "planner/bound.h"

#include <algorithm>
#include <vector>

#include "program/step_program.h"
#include "simulator/step_costs.h"

namespace parallax {

namespace {

double d(int64_t x) { return static_cast<double>(x); }

constexpr double kRounding = 1e-9;

struct StagePasses {
  double f0 = 0, b0 = 0, w0 = 0;  // chunk 0
  double work = 0;                // every pass of the step, folded sends included
  double compute = 0;             // every pass, compute alone
};

StagePasses stage_passes(const OpCosts& costs, const Plan& p, int64_t s, double fold_s) {
  StagePasses out;
  const double m = d(p.micro_batches());
  const int64_t last_vs = p.pp * p.virtual_stages - 1;
  const bool split = splits_weight_gradients(p.schedule);
  for (int64_t k = 0; k < p.virtual_stages; ++k) {
    ProgramOp op;
    op.type = ProgramOpType::kCompute;
    op.chunk = static_cast<int32_t>(k);
    op.pass = OpKind::kForward;
    const double f = costs.duration_s(op, s);
    op.pass = OpKind::kBackward;
    const double b = costs.duration_s(op, s);
    op.pass = OpKind::kWeight;
    const double w = split ? costs.duration_s(op, s) : 0.0;
    if (k == 0) out.f0 = f, out.b0 = b, out.w0 = w;  // a stage's first and last passes run alone
    // With the all-to-alls overlapped, any other pass may run beside an opposite one, shorter.
    double fb = f + b;
    if (p.execution.moe_a2a_overlap && p.ep > 1) {
      op.exchange_overlapped = true;
      op.pass = OpKind::kForward;
      fb = costs.duration_s(op, s);
      op.pass = OpKind::kBackward;
      fb += costs.duration_s(op, s);
    }
    const int64_t vs = virtual_stage(s, k, p.pp);
    const double sends = d((vs < last_vs ? 1 : 0) + (vs > 0 ? 1 : 0));  // F sends on, B sends back
    out.compute += m * (fb + w);
    out.work += m * (fb + w + sends * fold_s);
  }
  return out;
}

// Per stage, the durations of its dp-stream collectives: (once a step, per micro-batch).
std::vector<std::pair<double, double>> dp_stream_load(const ModelSpec& m, const OpCosts& costs, const Plan& plan) {
  Plan few = plan;
  const int64_t small = plan.schedule == Schedule::kInterleaved ? plan.pp : 1;
  few.global_batch = small * plan.micro_batch * plan.dp;
  const StepProgram program = build_step_program(m, few);
  std::vector<std::pair<double, double>> load(program.stages.size());
  for (size_t s = 0; s < program.stages.size(); ++s) {
    for (const ProgramOp& op : program.stages[s].ops)
      if (op.type == ProgramOpType::kCollective)
        (op.micro_batch >= 0 ? load[s].second : load[s].first) += costs.duration_s(op, static_cast<int64_t>(s));
    load[s].second /= d(small);
  }
  return load;
}

// (3): the largest sum of one stage's collective durations.
double dp_stream_bound_s(const ModelSpec& m, const OpCosts& costs, const Plan& plan) {
  double bound = 0;
  for (const auto& [once, per_micro_batch] : dp_stream_load(m, costs, plan))
    bound = std::max(bound, once + d(plan.micro_batches()) * per_micro_batch);
  return bound;
}

}  // namespace

double step_lower_bound_s(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, double beat_s) {
  const OpCosts costs(m, c, plan);
  ProgramOp transfer;
  transfer.type = ProgramOpType::kSend;
  const double hop = plan.pp > 1 ? costs.duration_s(transfer, 0) : 0.0;
  const double fold = plan.execution.overlap_p2p ? 0.0 : hop;
  ProgramOp optimizer;
  optimizer.type = ProgramOpType::kOptimizer;
  const double opt0 = costs.duration_s(optimizer, 0);
  const bool split = splits_weight_gradients(plan.schedule);
  const double mbs = d(plan.micro_batches());
  double bound = 0, fill = 0, drain = 0;  // fill: A_s; drain: sum_{j<s} (hop + b_j0)
  for (int64_t s = 0; s < plan.pp; ++s) {
    const StagePasses sp = stage_passes(costs, plan, s, fold);
    const double opt = s == 0 ? opt0 : costs.duration_s(optimizer, s);
    const double held_back = split ? std::min(d(s + 1), mbs) * sp.w0 : 0.0;
    bound = std::max({bound, fill + sp.work + opt, fill + (sp.compute - held_back) + drain + opt0});
    fill += sp.f0 + hop;
    drain += hop + sp.b0;
  }
  bound *= 1 - kRounding;
  if (bound > beat_s) return bound;
  return std::max(bound, dp_stream_bound_s(m, costs, plan) * (1 - kRounding));
}

double dp_stream_seconds_per_micro_batch(const ModelSpec& m, const OpCosts& costs, const Plan& plan) {
  double most = 0;
  for (const auto& load : dp_stream_load(m, costs, plan)) most = std::max(most, load.second);
  return most;
}

}  // namespace parallax
