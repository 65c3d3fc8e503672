// Search speed: the full planner search for a 1T-parameter GPT (128 layers, h 25,600, 160 heads,
// s 2048, global batch 4096) on 16,384 H100s, on one thread and on all cores; DeepSeek-V3 (every
// EP degree of its 256 experts) on 2,048 H100s and Llama-3.1-8B at 131,072 tokens (every CP
// degree) on 64; and the cost of pricing one configuration. Counters: configurations considered per second (the whole space,
// legal or not), priced per second (legal, distinct, costed by the memory model and, if they
// fit, the step model), per core. Then the matrix of every bundled model by 8-16,384 GPUs.
#include <thread>

#include <benchmark/benchmark.h>

#include "planner/search.h"
#include "planner/simulation.h"

namespace parallax {
namespace {

const ModelSpec& model() {
  static const ModelSpec m = load_model("gpt-1t").value();
  return m;
}
const ClusterSpec& cluster() {
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  return c;
}

// The 1T model on 16,384 GPUs, its top 10, on `threads` threads.
SearchOptions one_t_search(int threads) {
  SearchOptions o;
  o.gpus = 16384;
  o.global_batch = 4096;
  o.seq_len = 2048;
  o.top_k = 10;
  o.threads = threads;
  return o;
}

void BM_Search1T16k(benchmark::State& state) {
  const SearchOptions o = one_t_search(static_cast<int>(state.range(0)));
  int64_t considered = 0, priced = 0, simulated = 0;
  for (auto _ : state) {
    Result<SearchResult> r = search(model(), cluster(), o);
    considered += r->considered;
    priced += r->evaluated;
    simulated += r->simulated;
    benchmark::DoNotOptimize(r->plans.data());
  }
  state.counters["simulated"] = double(simulated) / double(state.iterations());
  const double threads = static_cast<double>(o.threads);
  state.counters["considered_per_s"] = benchmark::Counter(double(considered), benchmark::Counter::kIsRate);
  state.counters["considered_per_s_per_core"] =
      benchmark::Counter(double(considered) / threads, benchmark::Counter::kIsRate);
  state.counters["priced_per_s_per_core"] = benchmark::Counter(double(priced) / threads, benchmark::Counter::kIsRate);
  state.counters["configurations"] = double(considered) / double(state.iterations());
}
BENCHMARK(BM_Search1T16k)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same search, on one thread, pruned as before the bound: by the estimate with a margin.
void BM_Search1T16kEstimate(benchmark::State& state) {
  SearchOptions o = one_t_search(1);
  o.pruning = SearchOptions::Pruning::kEstimate;
  int64_t simulated = 0;
  for (auto _ : state) simulated += search(model(), cluster(), o)->simulated;
  state.counters["simulated"] = double(simulated) / double(state.iterations());
}
BENCHMARK(BM_Search1T16kEstimate)->Unit(benchmark::kMillisecond)->UseRealTime();

// The searches that range over EP (an MoE model) and CP (a long sequence), on all cores.
void search_once(benchmark::State& state, const char* model_name, int64_t gpus, int64_t seq_len, int64_t batch) {
  const ModelSpec m = load_model(model_name).value();
  SearchOptions o;
  o.gpus = gpus, o.seq_len = seq_len, o.global_batch = batch, o.top_k = 10;
  int64_t considered = 0;
  for (auto _ : state) {
    Result<SearchResult> r = search(m, cluster(), o);
    considered += r->considered;
    benchmark::DoNotOptimize(r->plans.data());
  }
  state.counters["configurations"] = double(considered) / double(state.iterations());
}
void BM_SearchDeepSeekV3On2048(benchmark::State& state) { search_once(state, "deepseek-v3", 2048, 4096, 1024); }
BENCHMARK(BM_SearchDeepSeekV3On2048)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_SearchLlama8B128kOn64(benchmark::State& state) { search_once(state, "llama3.1-8b", 64, 131072, 32); }
BENCHMARK(BM_SearchLlama8B128kOn64)->Unit(benchmark::kMillisecond)->UseRealTime();

// One configuration priced from scratch: layer and edge timings, memory and step model.
void BM_EstimateOnePlan(benchmark::State& state) {
  Plan p;
  p.tp = 8;
  p.pp = 64;
  p.dp = 32;
  p.zero = 1;
  p.global_batch = 4096;
  p.seq_len = 2048;
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  p.sequence_parallel = true;
  p.recompute = Recompute::kSelective;
  for (auto _ : state) benchmark::DoNotOptimize(estimate_step(model(), cluster(), p).step_time_s);
  state.counters["plans_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EstimateOnePlan);

// The matrix: every bundled model on 8 to 16,384 GPUs with the planner's defaults (dgx-h100,
// ~4M tokens, bf16, top 10), one search per cell, wall time. A model too large for the smallest
// counts is a cell whose search finds no plan; it is timed all the same. BM_MatrixEstimate: the
// same cells pruned by the estimate with a margin (the search before the bound), for comparison.
void BM_Matrix(benchmark::State& state, const std::string& model, int64_t gpus, SearchOptions::Pruning pruning) {
  const ModelSpec m = load_model(model).value();
  SearchOptions o;
  o.pruning = pruning;
  o.gpus = gpus;
  o.seq_len = default_seq_len(m);
  o.global_batch = default_global_batch(o.seq_len, gpus);
  int64_t simulated = 0, bounded = 0;
  for (auto _ : state) {
    Result<SearchResult> r = search(m, cluster(), o);
    simulated += r.ok() ? r->simulated : 0;
    bounded += r.ok() ? r->bounded : 0;
  }
  state.counters["simulated"] = double(simulated) / double(state.iterations());
  if (pruning == SearchOptions::Pruning::kBound) state.counters["bounded"] = double(bounded) / double(state.iterations());
}

const bool kMatrix = [] {
  for (const char* model : {"13b", "deepseek-v2-lite", "deepseek-v3", "gpt-1.3b", "gpt-1t", "gpt-22b", "gpt-530b", "gpt2",
                            "gpt3-175b", "llama2-13b", "llama2-70b", "llama2-7b", "llama3-70b", "llama3-8b",
                            "llama3.1-405b", "llama3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen2-7b"})
    for (int64_t gpus : {8, 64, 512, 4096, 16384})
      for (const auto& [name, pruning] : {std::pair{"BM_Matrix/", SearchOptions::Pruning::kBound},
                                          std::pair{"BM_MatrixEstimate/", SearchOptions::Pruning::kEstimate}})
        benchmark::RegisterBenchmark((name + std::string(model) + "/" + std::to_string(gpus)).c_str(), BM_Matrix,
                                     std::string(model), gpus, pruning)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->Iterations(1);
  return true;
}();

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) {
  parallax::keep_freed_memory();  // as planner and simulate run
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
