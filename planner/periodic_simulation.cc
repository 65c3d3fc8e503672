// simulate_report: a long step's measures from three short ones (simulation.h says why that is
// exact). Each measure X of the step is checked to lie on one line through the three, then taken
// at m: X(m) = X(c) + (m - m_c) / q * (X(c) - X(b)).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "planner/bound.h"
#include "planner/simulation.h"

namespace parallax {

namespace {

// Every affine measure of a step, flattened, in a fixed order.
std::vector<double> flatten(const StepMeasures& s) {
  std::vector<double> v{s.makespan_s, s.optimizer_s};
  for (const StageReport& r : s.stages)
    v.insert(v.end(), {r.busy_s, r.exposed_pp_s, r.exposed_dp_s, r.tp_s, r.pipeline_end_s, static_cast<double>(r.peak_in_flight)});
  for (const CommBytes& b : s.stage_bytes) v.insert(v.end(), {b.tp, b.pp, b.dp, b.dp_replica, b.dp_expert});
  return v;
}

StepMeasures unflatten(const std::vector<double>& v, size_t stages) {
  StepMeasures s;
  size_t i = 0;
  s.makespan_s = v[i++], s.optimizer_s = v[i++];
  s.stages.resize(stages);
  for (StageReport& r : s.stages) {
    r.busy_s = v[i++], r.exposed_pp_s = v[i++], r.exposed_dp_s = v[i++], r.tp_s = v[i++], r.pipeline_end_s = v[i++];
    r.peak_in_flight = std::llround(v[i++]);
  }
  s.stage_bytes.resize(stages);
  for (CommBytes& b : s.stage_bytes) b.tp = v[i++], b.pp = v[i++], b.dp = v[i++], b.dp_replica = v[i++], b.dp_expert = v[i++];
  return s;
}

// Second differences this small are rounding: the three steps lie on one line.
constexpr double kLineTolerance = 1e-9;

bool on_one_line(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& c) {
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max({std::abs(a[i]), std::abs(b[i]), std::abs(c[i]), 1e-12});
    if (std::abs(c[i] - 2 * b[i] + a[i]) > kLineTolerance * scale) return false;
  }
  return true;
}

Plan with_micro_batches(const Plan& p, int64_t m) {
  Plan q = p;
  q.global_batch = m * p.micro_batch * p.dp;
  return q;
}

// The measures of steps of m_a, m_a + q and m_a + 2q micro-batches, if they lie on one line that
// goes on: no stream needs more per micro-batch than the line grows by (a stage's compute, slowed
// by the collectives beside it; its dp stream). One that does has not caught up yet — ZB-H1's
// held-back weight passes absorb such a lag for a while — and the line would bend later.
// `dp_per_micro_batch`: dp_stream_seconds_per_micro_batch, or 0 where no collective is per pass.
std::optional<std::array<std::vector<double>, 3>> line_at(const ModelSpec& m, const ClusterSpec& c, const Plan& plan,
                                                          double dp_per_micro_batch, int64_t m_a, int64_t q) {
  std::array<std::vector<double>, 3> at;
  for (int k = 0; k < 3; ++k) {
    // The timeline's own measures, not the report: the memory model and the totals follow from m.
    Result<StepMeasures> short_step = simulate_measures(m, c, with_micro_batches(plan, m_a + k * q));
    if (!short_step.ok()) return std::nullopt;
    at[k] = flatten(*short_step);
  }
  if (!on_one_line(at[0], at[1], at[2])) return std::nullopt;
  const double slope = (at[2][0] - at[1][0]) * (1 + kLineTolerance);
  const StepMeasures b = unflatten(at[1], static_cast<size_t>(plan.pp)), e = unflatten(at[2], static_cast<size_t>(plan.pp));
  for (int64_t s = 0; s < plan.pp; ++s)
    if (e.stages[s].busy_s - b.stages[s].busy_s > slope) return std::nullopt;
  if (dp_per_micro_batch * static_cast<double>(q) > slope) return std::nullopt;
  return at;
}

}  // namespace

Result<Simulation> simulate_report(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  // 1F1B's and ZB-H1's warm-up holds up to PP micro-batches, interleaving runs rounds of PP: past
  // PP + 2 (interleaved: 2 PP) the steady state has begun, and the check falls back where it has
  // not: to a window three times later (NCCL's slowdown of the compute beside ZeRO-3's gathers
  // settles geometrically over a few micro-batches), then to every event. The three short steps
  // must together be shorter than the step itself.
  const int64_t q = plan.schedule == Schedule::kInterleaved ? plan.pp : 1;
  const int64_t first = plan.schedule == Schedule::kInterleaved ? 2 * plan.pp : plan.pp + 2, mbs = plan.micro_batches();
  if (3 * first + 3 * q >= mbs) return simulate_step(m, c, plan);
  const OpCosts costs(m, c, plan);
  const double dp_per_micro_batch = plan.zero >= 2 ? dp_stream_seconds_per_micro_batch(m, costs, plan) : 0.0;
  for (int64_t m_a : {first, 3 * first}) {
    if (3 * m_a + 3 * q >= mbs) break;
    const auto at = line_at(m, c, plan, dp_per_micro_batch, m_a, q);
    if (!at) continue;
    std::vector<double> line((*at)[2].size());
    const double steps = static_cast<double>(mbs - m_a - 2 * q) / static_cast<double>(q);
    for (size_t i = 0; i < line.size(); ++i) line[i] = (*at)[2][i] + steps * ((*at)[2][i] - (*at)[1][i]);
    Simulation sim;
    sim.plan = plan;
    sim.extrapolated = true;
    summarise(m, c, costs.layer(), unflatten(line, static_cast<size_t>(plan.pp)), sim);
    return sim;
  }
  return simulate_step(m, c, plan);
}

}  // namespace parallax
