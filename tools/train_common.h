// What the two execution paths of `train` share (CPU ranks under MPI in train_main.cc, GPU ranks
// in train_gpu.cc): the parsed options and the trace of a measured step in the simulator's format.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "planner/plan.h"
#include "runtime/communicator.h"
#include "runtime/trainer.h"

namespace parallax {

struct TrainFlags {
  std::string plan_file, model, format = "table", trace, data, checkpoint, device = "cpu", init = "exact";
  int64_t steps = 5, checkpoint_every = 0, fail_rank = -1, fail_after_steps = 0, inject_overflow_step = -1,
          skip_step = -1, emulate_rank = -1;
  double watchdog_s = 60, peak_tflops = 0;
  bool resume = false;
  uint64_t seed = 1234;
  double lr = 1e-3;
};

double median(std::vector<double> v);
// The median step time after the first (warm-up) step.
double steady_step_time(const std::vector<double>& times);

// One measured op and the pipeline stage (trace process) it ran on.
struct StageOp {
  int stage = 0;
  OpRecord op;
};

// The Chrome trace of a measured step: one process per pipeline stage, the simulator's tracks and
// event names, and metadata with the plan, model and measured totals.
nlohmann::json measured_trace(const Plan& plan, const ModelSpec& m, const std::vector<StageOp>& ops,
                              const nlohmann::json& metadata);

// Errors every rank sees alike end every rank with exit 2; rank 0 says why (defined in train_main.cc).
[[noreturn]] void fail_all(Communicator& world, const std::string& message);

// `train --device cuda`: runs the plan on GPUs (or emulates one rank); returns the exit code.
int run_gpu_training(const TrainFlags& flags, const ModelSpec& m, const Plan& plan, const TrainOptions& options,
                     Communicator& cpu_world);

}  // namespace parallax
