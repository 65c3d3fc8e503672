// Search: enumerates every TP x CP x PP x DP x EP x ZeRO stage x micro-batch x schedule (with each legal
// chunk count) x recompute x sequence-parallel x offload configuration for a model, cluster and GPU
// count; rejects illegal ones by rule (counting each reason), drops those that do not fit in
// memory and prices the rest with the analytical model; then simulates candidates in the order of
// that estimate, skipping each whose provable lower bound (planner/bound.h) is slower than the K-th
// best simulated step so far — so the top K is that of simulating every candidate — and ranks by
// simulated step time. Runs on several threads; the result does not depend on their count.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "planner/estimate.h"
#include "program/plan.h"
#include "simulator/cluster_spec.h"

namespace parallax {

// The planner's defaults (stated in its output when the user gave none): min(max positions,
// 4096) tokens, and about 4M tokens per step.
int64_t default_seq_len(const ModelSpec& m);
int64_t default_global_batch(int64_t seq_len, int64_t gpus = 1);

// Where a search is: plans that fit by the estimate, candidates in simulation order, candidates
// simulated so far, the best simulated step yet.
struct SearchProgress {
  int64_t fitting = 0, candidates = 0, simulated = 0;
  double best_step_s = 0;
};

struct SearchOptions {
  int64_t gpus = 0;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  Precision precision = Precision::kBf16;
  Execution execution;
  size_t top_k = 10;
  int threads = 0;          // 0: all hardware threads
  bool simulate = true;     // rank by the discrete-event simulator (else the analytical estimate)
  // Only plans Parallax's own runtime executes: "" (any), "cpu" or "cuda" (program/runtime_support.h).
  // The framework (execution.framework) restricts the search to what it runs the same way.
  std::string runtime;
  // Filters: plans must leave (1 - max_memory_fraction) of HBM free; offload may be excluded; the
  // schedules may be restricted (empty: all); degrees and the ZeRO stage may be fixed (0 / -1: free).
  double max_memory_fraction = 1.0;
  bool allow_offload = true;
  std::vector<Schedule> schedules;
  int64_t fixed_tp = 0, fixed_pp = 0, fixed_dp = 0, fixed_cp = 0, fixed_ep = 0;
  int fixed_zero = -1;
  // Simulate every event of each candidate (simulate_step) rather than the line through three
  // short steps (simulate_report): the same ranking, slower; for checking it.
  bool every_event = false;
  // Which candidates are left unsimulated: by the estimate with a margin (kEstimate, fast, not
  // provably the top K), or by a provable lower bound (kBound, planner/bound.h: a candidate is
  // skipped only when its bound is slower than the K-th best simulated step), or none (kNone:
  // every candidate simulated, for checking the other two).
  enum class Pruning { kEstimate, kBound, kNone };
  Pruning pruning = Pruning::kBound;
  // Called from the calling thread after the estimate and after each simulated candidate.
  std::function<void(const SearchProgress&)> progress;
};

// Why a configuration was not ranked: a plan Violation, or one of these.
enum class Rejection {
  kRedundant = static_cast<int>(Violation::kCount),  // same execution as a plan already counted
  kFramework,        // the chosen framework does not run it (framework_refusal)
  kRuntime,          // Parallax's chosen runtime does not run it
  kOutOfMemory,
  kOutOfHostMemory,
  kCount
};
constexpr size_t kRejectionKinds = static_cast<size_t>(Rejection::kCount);
const char* rejection_key(size_t index);  // violation_key or "redundant", "out_of_memory", ...

struct RankedPlan {
  Plan plan;
  StepReport report;
};

struct SearchResult {
  std::vector<RankedPlan> plans;  // best first, at most top_k
  int64_t considered = 0;         // every configuration of the space, legal or not
  int64_t evaluated = 0;          // legal, distinct configurations priced by the memory model
  int64_t feasible = 0;           // legal and fitting in memory
  int64_t simulated = 0;          // candidates run through the discrete-event simulator
  int64_t bounded = 0;            // Pruning::kBound: candidates ruled out by their lower bound
  std::array<int64_t, kRejectionKinds> rejected{};  // indexed by Violation, then Rejection
  std::string framework_refusal;  // the first plan the framework refused, why (framework_refusal)
};

// Errors: options out of range (gpus < 1, more GPUs than the cluster has, a batch or sequence
// length < 1). An empty `plans` is not an error here: the caller explains why nothing fits.
Result<SearchResult> search(const ModelSpec& m, const ClusterSpec& c, const SearchOptions& o);

// Ordering of the ranking: step time (to the nanosecond), then peak memory, then the plan's fields
// (deterministic).
bool ranks_before(const RankedPlan& a, const RankedPlan& b);

}  // namespace parallax
