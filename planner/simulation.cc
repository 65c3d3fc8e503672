#include "planner/simulation.h"

#include <algorithm>

#include "planner/memory_model.h"
#include "simulator/trace.h"

namespace parallax {

namespace {

double d(int64_t x) { return static_cast<double>(x); }

bool is_send(TaskKind k) { return k == TaskKind::kSendForward || k == TaskKind::kSendBackward; }
bool is_dp(TaskKind k) {
  return k == TaskKind::kDpAllReduce || k == TaskKind::kDpReduceScatter || k == TaskKind::kDpAllGather;
}

// Per stage: compute busy time, pipeline end, idle gaps spent waiting for a pipeline transfer.
void compute_stream_stats(const Simulation& sim, std::vector<StageReport>& stages) {
  const TaskGraph& g = sim.step.graph;
  const Timeline& tl = sim.timeline;
  // op task -> the transfer (or, blocking, the sending op on another stage) or the DP task it
  // waits for
  std::vector<TaskId> incoming(g.task_count(), -1), dp_gate(g.task_count(), -1);
  for (const auto& [before, after] : g.dependencies()) {
    if (g.stream_kind(g.stream(after)) != StreamKind::kCompute) continue;
    if (is_dp(g.label(before).kind)) dp_gate[after] = before;
    else if (is_send(g.label(before).kind) || g.stream_rank(g.stream(before)) != g.stream_rank(g.stream(after)))
      incoming[after] = before;
  }
  // Task ids grow in each stream's program order, so one pass sees every compute stream in order.
  std::vector<double> prev_finish(stages.size(), 0.0);
  for (size_t i = 0; i < g.task_count(); ++i) {
    const TaskId t = static_cast<TaskId>(i);
    const size_t s = static_cast<size_t>(g.stream_rank(g.stream(t)));
    const TaskKind k = g.label(t).kind;
    if (g.stream(t) != sim.step.compute_stream[s] || k == TaskKind::kOptimizer || k == TaskKind::kOffload) continue;
    StageReport& r = stages[s];
    r.busy_s += g.duration_s(t);
    r.pipeline_end_s = std::max(r.pipeline_end_s, tl.finish_s[t]);
    const double gap = tl.start_s[t] - prev_finish[s];
    if (gap > 0 && dp_gate[t] >= 0 && tl.finish_s[dp_gate[t]] >= tl.start_s[t]) r.dp_stall_s += gap;  // ZeRO-2/3
    else if (gap > 0 && incoming[t] >= 0 && tl.finish_s[incoming[t]] >= tl.start_s[t]) r.exposed_pp_s += gap;
    prev_finish[s] = tl.finish_s[t];
  }
  // Blocking sends hold the sender's compute stream.
  for (size_t s = 0; s < stages.size(); ++s)
    for (const PipelineOp& op : sim.step.ops[s])
      if (send_target(sim.plan, op, static_cast<int64_t>(s)) >= 0) stages[s].exposed_pp_s += sim.step.blocking_send_s;
}

CommBytes comm_bytes(const Simulation& sim, int64_t stages) {
  const TaskGraph& g = sim.step.graph;
  std::vector<CommBytes> per(stages);
  if (sim.step.blocking_send_s > 0)
    for (int64_t s = 0; s < stages; ++s)
      for (const PipelineOp& op : sim.step.ops[s])
        if (send_target(sim.plan, op, s) >= 0) per[s].pp += sim.step.send_bytes;
  for (size_t i = 0; i < g.task_count(); ++i) {
    const TaskId t = static_cast<TaskId>(i);
    CommBytes& c = per[g.stream_rank(g.stream(t))];
    if (is_send(g.label(t).kind)) c.pp += g.bytes(t);
    if (is_dp(g.label(t).kind)) c.dp += g.bytes(t);
  }
  CommBytes worst;
  for (const CommBytes& c : per) {
    worst.pp = std::max(worst.pp, c.pp);
    worst.dp = std::max(worst.dp, c.dp);
  }
  return worst;
}

void summarise(const ModelSpec& m, const ClusterSpec& c, const Plan& p, Simulation& sim) {
  Estimate& e = sim.estimate;
  const Timeline& tl = sim.timeline;
  const double reserved = c.gpu.reserved_gib * 1073741824.0;
  const double layer_passes = d(p.micro_batches()) * d(m.layers / p.pp);
  double bubble_sum = 0;
  std::vector<double> dp_end(sim.stages.size(), 0.0);  // last DP task's finish per stage
  const TaskGraph& g = sim.step.graph;
  for (size_t i = 0; i < g.task_count(); ++i)
    if (is_dp(g.label(static_cast<TaskId>(i)).kind)) {
      const size_t st = static_cast<size_t>(g.stream_rank(g.stream(static_cast<TaskId>(i))));
      dp_end[st] = std::max(dp_end[st], tl.finish_s[i]);
    }
  for (size_t s = 0; s < sim.stages.size(); ++s) {
    StageReport& r = sim.stages[s];
    const TaskId opt = sim.step.optimizer[s];
    r.tp_s = layer_passes * sim.step.layer.tp_comm_s;
    // Waiting for DP reductions before the optimizer, and the ZeRO all-gather after it.
    r.exposed_dp_s = r.dp_stall_s + (tl.start_s[opt] - r.pipeline_end_s) + (dp_end[s] > tl.finish_s[opt] ? dp_end[s] - tl.finish_s[opt] : 0);
    r.peak_in_flight = max_in_flight(sim.step.ops[s], p.schedule);
    r.memory = stage_memory(m, p, static_cast<int64_t>(s), reserved);
    // Activations as the schedule holds them (the memory model's closed form is replaced).
    const double formula = d(in_flight_chunk_passes(p.schedule, p.pp, p.micro_batches(), p.virtual_stages,
                                                    static_cast<int64_t>(s)));
    const double scale = p.precision == Precision::kFp32 ? 2.0 : 1.0;
    r.memory.activations += (d(r.peak_in_flight) - formula) * sim.step.activation_bytes_per_pass * scale;
    const double allocated = r.memory.weights + r.memory.gradients + r.memory.optimizer + r.memory.activations +
                             r.memory.buffers;
    r.memory.margin = p.execution.allocator_margin * allocated + reserved;
    e.pipeline_s = std::max(e.pipeline_s, r.pipeline_end_s - r.dp_stall_s);
    e.optimizer_s = std::max(e.optimizer_s, tl.finish_s[opt] - tl.start_s[opt]);
    e.dp_exposed_s = std::max(e.dp_exposed_s, r.exposed_dp_s);
    e.tp_exposed_s = std::max(e.tp_exposed_s, r.tp_s);
    if (s == 0 || r.memory.total() > e.memory.total()) e.memory = r.memory;
  }
  for (StageReport& r : sim.stages) {
    r.bubble_s = std::max(0.0, e.pipeline_s - r.busy_s);
    bubble_sum += r.bubble_s;
  }
  e.step_time_s = tl.makespan_s;
  e.bubble_fraction = e.pipeline_s > 0 ? bubble_sum / d(p.pp) / e.pipeline_s : 0;
  e.overhead_s = p.execution.step_overhead_us * 1e-6;
  e.comm_bytes_per_gpu = comm_bytes(sim, p.pp);
  e.comm_bytes_per_gpu.tp = layer_passes * sim.step.layer.tp_bytes;
  finish_estimate(m, c, p, e);
}

}  // namespace

Result<Simulation> simulate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  Simulation sim;
  sim.plan = plan;
  sim.step = lower_step(m, c, plan);
  Result<Timeline> tl = run_tasks(sim.step.graph);
  if (!tl.ok()) return Error{tl.error()};
  sim.timeline = std::move(tl).value();
  sim.stages.resize(plan.pp);
  compute_stream_stats(sim, sim.stages);
  summarise(m, c, plan, sim);
  return sim;
}

}  // namespace parallax

namespace parallax {

namespace {

// TP collectives sit at the end of each layer's share of an op.
void tp_events(const ModelSpec& m, const Plan& p, const Simulation& sim, int64_t s, std::vector<TraceEvent>& out) {
  const LayerTiming& lt = sim.step.layer;
  const int64_t layers = p.layers_per_chunk(m.layers);
  const std::string kind = p.sequence_parallel ? "reduce-scatter tp layer=" : "allreduce tp layer=";
  const bool split = splits_weight_gradients(p.schedule);
  for (size_t i = 0; i < sim.step.ops[s].size(); ++i) {
    const PipelineOp& op = sim.step.ops[s][i];
    double tp = op.kind == OpKind::kForward    ? lt.tp_forward_s
                : op.kind == OpKind::kBackward ? lt.tp_backward_input_s + (split ? 0 : lt.tp_backward_weight_s)
                                               : lt.tp_backward_weight_s;
    if (tp <= 0) continue;
    const double start = sim.timeline.start_s[sim.step.op_first_tasks[s][i]];
    const double tail = send_target(p, op, s) >= 0 ? sim.step.blocking_send_s : 0.0;
    const double slice = (sim.timeline.finish_s[sim.step.op_tasks[s][i]] - tail - start) / static_cast<double>(layers);
    const int64_t base = virtual_stage(s, op.chunk, p.pp) * layers;
    for (int64_t j = 0; j < layers; ++j) {
      const int64_t layer = op.kind == OpKind::kForward ? base + j : base + layers - 1 - j;
      out.push_back({static_cast<int32_t>(s), StreamKind::kTp, kind + std::to_string(layer),
                     start + (j + 1) * slice - std::min(tp, slice), std::min(tp, slice)});
    }
  }
}

// Blocking sends are the tail of their op on the compute stream; show them on the pp-send track.
void send_events(const Plan& p, const Simulation& sim, int64_t s, std::vector<TraceEvent>& out) {
  const double send = sim.step.blocking_send_s;
  if (send <= 0) return;
  for (size_t i = 0; i < sim.step.ops[s].size(); ++i) {
    const PipelineOp& op = sim.step.ops[s][i];
    if (send_target(p, op, s) < 0) continue;
    const double end = sim.timeline.finish_s[sim.step.op_tasks[s][i]];
    out.push_back({static_cast<int32_t>(s), StreamKind::kPpSend, "send pp mb=" + std::to_string(op.micro_batch),
                   end - send, send});
  }
}

void memory_samples(const Plan& p, const Simulation& sim, int64_t s, std::vector<CounterSample>& out) {
  const OpKind release = splits_weight_gradients(p.schedule) ? OpKind::kWeight : OpKind::kBackward;
  double held = 0;
  out.push_back({static_cast<int32_t>(s), 0.0, 0.0});
  for (size_t i = 0; i < sim.step.ops[s].size(); ++i) {
    const PipelineOp& op = sim.step.ops[s][i];
    if (op.kind == OpKind::kForward) {
      held += sim.step.activation_bytes_per_pass;
      out.push_back({static_cast<int32_t>(s), sim.timeline.start_s[sim.step.op_first_tasks[s][i]], held});
    } else if (op.kind == release) {
      held -= sim.step.activation_bytes_per_pass;
      out.push_back({static_cast<int32_t>(s), sim.timeline.finish_s[sim.step.op_tasks[s][i]], held});
    }
  }
}

}  // namespace

nlohmann::json simulation_trace(const ModelSpec& m, const Plan& plan, const Simulation& sim,
                                const nlohmann::json& metadata) {
  std::vector<TraceEvent> extra;
  std::vector<CounterSample> memory;
  for (int64_t s = 0; s < plan.pp; ++s) {
    tp_events(m, plan, sim, s, extra);
    send_events(plan, sim, s, extra);
    memory_samples(plan, sim, s, memory);
  }
  return chrome_trace(sim.step.graph, sim.timeline, extra, memory, metadata);
}

}  // namespace parallax

namespace parallax {

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
