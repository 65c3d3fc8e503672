// Simulator speed: one step of the 1T GPT (128 layers, h 25,600) on 16,384 H100s — TP 8, PP 64,
// DP 32, 512 micro-batches per step (global batch 16,384), 1F1B and interleaved — lowered and
// run through the discrete-event engine. Counters: tasks (events) per second.
#include <benchmark/benchmark.h>

#include "planner/simulation.h"

namespace parallax {
namespace {

Plan one_t_plan(int64_t virtual_stages) {
  Plan p;
  p.tp = 8;
  p.pp = 64;
  p.dp = 32;
  p.zero = 1;
  p.global_batch = 16384;
  p.seq_len = 2048;
  p.sequence_parallel = true;
  p.recompute = Recompute::kSelective;
  p.schedule = virtual_stages == 1 ? Schedule::k1F1B : Schedule::kInterleaved;
  p.virtual_stages = virtual_stages;
  p.execution.overlap_grad_reduce = true;
  return p;
}

// Every event of the step (what --trace needs).
void BM_Simulate1T16k(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan p = one_t_plan(state.range(0));
  int64_t events = 0;
  for (auto _ : state) {
    Result<Simulation> sim = simulate_step(m, c, p);
    events += sim->timeline.events;
    benchmark::DoNotOptimize(sim->report.step_time_s);
  }
  state.counters["events_per_s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["events"] = double(events) / double(state.iterations());
}
BENCHMARK(BM_Simulate1T16k)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// The report the search ranks by: the line through three shorter steps (simulation.h).
void BM_Report1T16k(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan p = one_t_plan(state.range(0));
  bool extrapolated = false;
  for (auto _ : state) {
    Result<Simulation> sim = simulate_report(m, c, p);
    extrapolated = sim->extrapolated;
    benchmark::DoNotOptimize(sim->report.step_time_s);
  }
  // Interleaved 512 micro-batches over PP 64 are too few for three shorter steps to save work.
  state.counters["extrapolated"] = extrapolated ? 1 : 0;
}
BENCHMARK(BM_Report1T16k)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// The phases of one of the three short steps simulate_report runs for the 1F1B plan (PP + 2 = 66
// micro-batches): the step program, lowering it to tasks (program included), the event engine,
// and reading the measures off the timeline.
Plan short_plan() {
  Plan p = one_t_plan(1);
  p.global_batch = 66 * p.dp;
  return p;
}

void BM_PhaseProgram(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  const Plan p = short_plan();
  for (auto _ : state) benchmark::DoNotOptimize(build_step_program(m, p).stages.size());
}
BENCHMARK(BM_PhaseProgram)->Unit(benchmark::kMicrosecond);

void BM_PhaseLowering(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan p = short_plan();
  const OpCosts costs(m, c, p);
  for (auto _ : state) benchmark::DoNotOptimize(lower_step(m, p, costs).graph.task_count());
}
BENCHMARK(BM_PhaseLowering)->Unit(benchmark::kMicrosecond);

void BM_PhaseEngine(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan p = short_plan();
  const OpCosts costs(m, c, p);
  const LoweredStep step = lower_step(m, p, costs);
  for (auto _ : state) benchmark::DoNotOptimize(run_tasks(step.graph)->makespan_s);
  state.counters["tasks"] = double(step.graph.task_count());
}
BENCHMARK(BM_PhaseEngine)->Unit(benchmark::kMicrosecond);

void BM_PhaseMeasures(benchmark::State& state) {
  static const ModelSpec m = load_model("gpt-1t").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  const Simulation sim = simulate_step(m, c, short_plan()).value();
  for (auto _ : state) benchmark::DoNotOptimize(measures_of(sim).makespan_s);
}
BENCHMARK(BM_PhaseMeasures)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) {
  parallax::keep_freed_memory();  // as planner and simulate run
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
