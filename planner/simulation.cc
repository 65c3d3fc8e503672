#include "planner/simulation.h"

#include <algorithm>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "simulator/trace.h"

namespace parallax {

namespace {

double d(int64_t x) { return static_cast<double>(x); }

struct Span {
  double start_s, finish_s;
};

// When op i of stage s ran; a blocking send folded into its producer is that task's tail.
Span span_of(const Simulation& sim, int64_t s, size_t i) {
  const LoweredStep& st = sim.step;
  Span span{sim.timeline.start_s[st.first_task[s][i]], sim.timeline.finish_s[st.last_task[s][i]]};
  if (st.program.stages[s].ops[i].type == ProgramOpType::kSend && st.folded_send_s > 0)
    span.start_s = span.finish_s - st.folded_send_s;
  else
    span.finish_s -= st.folded_tail_s(s, i);
  return span;
}

bool is_pipeline_transfer(const ProgramOp& op) { return op.type == ProgramOpType::kSend || op.type == ProgramOpType::kRecv; }

// A receive as the trace shows it: from its posting to the data's arrival. The runtimes post
// receives in program order on the one pp-recv stream, each once the op before it is done and the
// previous receive has completed, so a transfer that arrived before its receive was posted (the
// sender ran ahead; NCCL's buffers held it) completes the moment it is posted — a zero-length
// event then, never one at the arrival time, which would sit inside an earlier receive still in
// flight. `track_free_s`: when the previous receive on the track ended.
Span recv_span(const Simulation& sim, int64_t s, size_t i, double track_free_s) {
  const ProgramOp& op = sim.step.program.stages[s].ops[i];
  const double posted_s = op.waits_for.empty() ? 0.0 : span_of(sim, s, op.waits_for[0]).finish_s;
  const double start_s = std::max(posted_s, track_free_s);
  return {start_s, std::max(start_s, span_of(sim, s, i).finish_s)};
}

// Busy, pipeline end, TP time and exposed waits of one stage's compute stream, and its optimizer's
// duration. One pass over the ops: each op's span (as span_of) is kept in `spans`, scratch, for
// the ops after it that wait on it.
StageReport stage_stats(const Simulation& sim, int64_t s, std::vector<Span>& spans, double* optimizer_s) {
  const StageProgram& sp = sim.step.program.stages[s];
  const size_t n = sp.ops.size();
  spans.resize(n);
  const std::vector<TaskId>& first = sim.step.first_task[s];
  const std::vector<TaskId>& last = sim.step.last_task[s];
  const double* start_s = sim.timeline.start_s.data();
  const double* finish_s = sim.timeline.finish_s.data();
  const double folded_s = sim.step.folded_send_s;
  StageReport r;
  double prev_finish = 0, dp_end = 0;
  for (size_t i = 0; i < n; ++i) {
    const ProgramOp& op = sp.ops[i];
    // span_of(sim, s, i), without looking the stage up again
    Span span{start_s[first[i]], finish_s[last[i]]};
    const bool send_tail = folded_s > 0 && op.type == ProgramOpType::kCompute && i + 1 < n &&
                           sp.ops[i + 1].type == ProgramOpType::kSend;  // folded_tail_s(s, i) > 0
    if (op.type == ProgramOpType::kSend && folded_s > 0) span.start_s = span.finish_s - folded_s;
    else span.finish_s -= send_tail ? folded_s : 0.0;
    spans[i] = span;
    if (op.type == ProgramOpType::kCollective && op.group != GroupKind::kTp) dp_end = std::max(dp_end, span.finish_s);
    if (op.type == ProgramOpType::kOptimizer) {
      // Waiting for the gradient reductions before the optimizer, and the weight gathers after it.
      r.exposed_dp_s += std::max(0.0, span.start_s - prev_finish);
      prev_finish = span.finish_s;
      *optimizer_s = std::max(*optimizer_s, span.finish_s - span.start_s);
      continue;
    }
    if (op.type != ProgramOpType::kCompute) continue;
    // As run: a compute task slowed by a collective beside it (NCCL SM contention) is busy longer.
    for (TaskId t = first[i]; t <= last[i]; ++t) r.busy_s += finish_s[t] - start_s[t];
    const double send_s = send_tail ? folded_s : 0.0;  // a blocking send holds the compute stream
    r.busy_s -= send_s;
    r.exposed_pp_s += send_s;
    r.tp_s += sim.tp_s(op, s);
    r.pipeline_end_s = std::max(r.pipeline_end_s, span.finish_s);
    const double gap = span.start_s - prev_finish;
    prev_finish = span.finish_s + send_s;
    if (gap <= 0) continue;
    int32_t cause = -1;  // the awaited op that finished last
    for (int32_t w : op.waits_for)
      if (cause < 0 || spans[w].finish_s > spans[cause].finish_s) cause = w;
    if (cause < 0 || spans[cause].finish_s < span.start_s) continue;
    (is_pipeline_transfer(sp.ops[cause]) ? r.exposed_pp_s : r.exposed_dp_s) += gap;
  }
  r.exposed_dp_s += std::max(0.0, dp_end - prev_finish);
  return r;
}

// Bytes each GPU of stage `s` sends, by the dimension they travel along.
CommBytes stage_comm_bytes(const StageProgram& sp) {
  CommBytes b;
  for (const ProgramOp& op : sp.ops) {
    if (op.type == ProgramOpType::kCompute) b.tp += op.sent_bytes;
    else if (op.type == ProgramOpType::kSend) b.pp += op.sent_bytes;
    else if (op.type == ProgramOpType::kCollective) {
      const bool dp = op.group == GroupKind::kDp || op.group == GroupKind::kDpReplica || op.group == GroupKind::kExpertDp;
      (op.group == GroupKind::kTp ? b.tp : dp ? b.dp : b.pp) += op.sent_bytes;
      if (op.group == GroupKind::kDpReplica) b.dp_replica += op.sent_bytes;
      if (op.group == GroupKind::kExpertDp) b.dp_expert += op.sent_bytes;
    }
  }
  return b;
}

}  // namespace

StepMeasures measures_of(const Simulation& sim) {
  StepMeasures out;
  out.makespan_s = sim.timeline.makespan_s;
  out.stages.reserve(static_cast<size_t>(sim.plan.pp));
  out.stage_bytes.reserve(static_cast<size_t>(sim.plan.pp));
  std::vector<Span> spans;
  for (int64_t s = 0; s < sim.plan.pp; ++s) {
    const StageProgram& sp = sim.step.program.stages[s];
    StageReport r = stage_stats(sim, s, spans, &out.optimizer_s);
    r.peak_in_flight = max_in_flight(sp.schedule, sim.plan.schedule);
    out.stages.push_back(r);
    out.stage_bytes.push_back(stage_comm_bytes(sp));
  }
  return out;
}

void summarise(const ModelSpec& m, const ClusterSpec& c, const LayerTiming& layer, const StepMeasures& measures,
               Simulation& sim) {
  const Plan& p = sim.plan;
  StepReport& e = sim.report;
  e.method = "simulation";
  const double reserved = c.gpu.reserved_gib * 1073741824.0;
  sim.stages = measures.stages;
  for (int64_t s = 0; s < p.pp; ++s) {
    StageReport& r = sim.stages[s];
    r.memory = stage_memory(m, p, s, reserved, r.peak_in_flight);
    e.pipeline_s = std::max(e.pipeline_s, r.pipeline_end_s);
    e.dp_exposed_s = std::max(e.dp_exposed_s, r.exposed_dp_s);
    e.tp_exposed_s = std::max(e.tp_exposed_s, r.tp_s);
    if (s == 0 || r.memory.total() > e.memory.total()) e.memory = r.memory;
    const CommBytes& b = measures.stage_bytes[s];
    e.comm_bytes_per_gpu.tp = std::max(e.comm_bytes_per_gpu.tp, b.tp);
    e.comm_bytes_per_gpu.pp = std::max(e.comm_bytes_per_gpu.pp, b.pp);
    if (b.dp >= e.comm_bytes_per_gpu.dp) {  // the stage sending the most, with its split
      e.comm_bytes_per_gpu.dp = b.dp;
      e.comm_bytes_per_gpu.dp_replica = b.dp_replica;
      e.comm_bytes_per_gpu.dp_expert = b.dp_expert;
    }
  }
  e.optimizer_s = measures.optimizer_s;
  double bubble_sum = 0;
  for (StageReport& r : sim.stages) {
    r.bubble_s = std::max(0.0, e.pipeline_s - r.busy_s);
    bubble_sum += r.bubble_s;
  }
  e.step_time_s = measures.makespan_s;
  e.bubble_fraction = e.pipeline_s > 0 ? bubble_sum / d(p.pp) / e.pipeline_s : 0;
  e.overhead_s = p.execution.step_overhead_us * 1e-6;
  // CP's and EP's exchanges run inside the compute ops: per layer pass, on the stage with the most layers.
  const double passes = d(p.micro_batches()) * d(p.max_stage_layers(m.layers));
  e.comm_bytes_per_gpu.cp = passes * layer.cp_bytes;
  e.comm_bytes_per_gpu.ep = passes * layer.ep_bytes;
  finish_report(m, c, p, e);
}

void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

namespace {

// The timeline of a step and the TP time inside its compute ops: what its measures are read from.
Status run_step(const ModelSpec& m, const Plan& plan, const OpCosts& costs, Simulation& sim) {
  sim.plan = plan;
  sim.step = lower_step(m, plan, costs);
  const TaskGraph& g = sim.step.graph;
  auto name = [&](TaskId t) {
    return op_name(sim.step.program.stages[g.stream_rank(g.stream(t))].ops[g.tag(t)]);
  };
  Result<Timeline> tl = run_tasks(g, name);
  if (!tl.ok()) return Error{tl.error()};
  sim.timeline = std::move(tl).value();
  sim.tp_pass_s.resize(plan.pp);
  for (int64_t s = 0; s < plan.pp; ++s)
    for (OpKind pass : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) {
      ProgramOp op;
      op.pass = pass;
      op.chunk = 0;
      sim.tp_pass_s[s][static_cast<int>(pass)] = costs.tp_s(op, s);
    }
  return Status{};
}

}  // namespace

Result<Simulation> simulate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  Simulation sim;
  const OpCosts costs(m, c, plan);
  if (Status st = run_step(m, plan, costs, sim); !st.ok()) return Error{st.error()};
  summarise(m, c, costs.layer(), measures_of(sim), sim);
  return sim;
}

Result<StepMeasures> simulate_measures(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  Simulation sim;
  const OpCosts costs(m, c, plan);
  if (Status st = run_step(m, plan, costs, sim); !st.ok()) return Error{st.error()};
  return measures_of(sim);
}

nlohmann::json simulation_trace(const Simulation& sim, const nlohmann::json& metadata) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t s = 0; s < sim.step.program.stages.size(); ++s) {
    const int pid = static_cast<int>(s);
    const double element_scale = sim.plan.precision == Precision::kFp32 ? 2 : 1;
    add_track_names(events, pid);
    const StageProgram& sp = sim.step.program.stages[s];
    double held = 0, recv_free_s = 0;
    events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "activation bytes"}, {"ts", 0}, {"args", {{"bytes", 0}}}});
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const ProgramOp& op = sp.ops[i];
      Span span = span_of(sim, static_cast<int64_t>(s), i);
      if (op.type == ProgramOpType::kRecv) {
        span = recv_span(sim, static_cast<int64_t>(s), i, recv_free_s);
        recv_free_s = span.finish_s;
      }
      nlohmann::json e = trace_event(pid, op.stream, op_name(op), span.start_s, span.finish_s - span.start_s);
      if (op.sent_bytes > 0) e["args"] = {{"bytes", op.sent_bytes}};
      events.push_back(std::move(e));
      const double tp = sim.tp_s(op, static_cast<int64_t>(s));
      if (op.type == ProgramOpType::kCompute && op.bytes > 0)  // the program's rule, as the runtimes'
        events.push_back(trace_event(pid, StreamKind::kTp, tp_event_name(op), span.finish_s - tp, tp));
      if (op.type != ProgramOpType::kCompute) continue;
      const bool alloc = op.pass == OpKind::kForward;
      if (!alloc && !op.frees_activations) continue;
      const double pass_bytes = sim.step.program.activation_bytes_per_pass(static_cast<int64_t>(s), op.chunk) * element_scale;
      held += alloc ? pass_bytes : -pass_bytes;
      events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "activation bytes"},
                        {"ts", (alloc ? span.start_s : span.finish_s) * kTraceUnitsPerSecond}, {"args", {{"bytes", held}}}});
    }
  }
  nlohmann::json meta = metadata;
  meta["step_time_s"] = sim.report.step_time_s;
  meta["bubble_fraction"] = sim.report.bubble_fraction;
  meta["peak_memory_bytes"] = sim.report.peak_memory_bytes;
  return trace_document(std::move(events), meta);
}

std::string simulation_svg(const Simulation& sim, const std::string& title) {
  const TaskGraph& g = sim.step.graph;
  return pipeline_svg(g, sim.timeline, title, [&](TaskId t) {
    const ProgramOp& op = sim.step.program.stages[g.stream_rank(g.stream(t))].ops[g.tag(t)];
    SvgClass k = SvgClass::kOther;
    if (op.type == ProgramOpType::kCompute)
      k = op.pass == OpKind::kForward ? SvgClass::kForward : op.pass == OpKind::kBackward ? SvgClass::kBackward : SvgClass::kWeight;
    else if (is_pipeline_transfer(op)) k = SvgClass::kPipeline;
    else if (op.type == ProgramOpType::kCollective) k = SvgClass::kData;
    return SvgTask{op_name(op), k};
  });
}

nlohmann::json stage_reports_json(const Simulation& sim) {
  nlohmann::json stages = nlohmann::json::array();
  for (size_t s = 0; s < sim.stages.size(); ++s) {
    const StageReport& r = sim.stages[s];
    const MemoryBreakdown& mem = r.memory;
    stages.push_back({{"stage", s}, {"busy_s", r.busy_s}, {"bubble_s", r.bubble_s},
                      {"exposed_s", {{"tp", r.tp_s}, {"pp", r.exposed_pp_s}, {"dp", r.exposed_dp_s}}},
                      {"pipeline_end_s", r.pipeline_end_s}, {"peak_in_flight", r.peak_in_flight},
                      {"memory_bytes", {{"weights", mem.weights}, {"gradients", mem.gradients}, {"optimizer", mem.optimizer},
                                        {"activations", mem.activations}, {"buffers", mem.buffers}, {"margin", mem.margin}}},
                      {"peak_memory_bytes", mem.total()}});
  }
  return stages;
}

}  // namespace parallax
