// What the two execution paths of `train` share (CPU ranks under MPI in train_main.cc, GPU ranks
// in train_gpu.cc): the parsed options and the trace of a measured step in the simulator's format.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "program/plan.h"
#include "program/step_program.h"
#include "runtime/communicator.h"
#include "runtime/trainer.h"

namespace parallax {

struct TrainFlags {
  std::string plan_file, model, format = "table", trace, data, checkpoint, device = "cpu", init = "exact";
  int64_t steps = 5, checkpoint_every = 0, fail_rank = -1, fail_after_steps = 0, inject_overflow_step = -1,
          skip_step = -1, emulate_rank = -1;
  double watchdog_s = 60, peak_tflops = 0;
  bool resume = false, decay_norms_and_biases = false;
  uint64_t seed = 1234;
  double lr = 1e-3;
};

// The median step time after the first (warm-up) step.
double steady_step_time(const std::vector<double>& times);
// One line per step as it ends (loss, time, tokens/s, fp16's loss scale), flushed: a table run of
// train is never silent.
void print_step(const Plan& plan, int64_t step, int64_t steps, const StepStats& stats, double time_s);

// What a run of steps produced.
struct RunLog {
  std::vector<double> losses, times;
  std::vector<int64_t> skipped;
  double loss_scale = 1;
};

// One measured op and the pipeline stage (trace process) it ran on.
struct StageOp {
  int stage = 0;
  OpRecord op;
};

// The Chrome trace of a measured step: one process per pipeline stage, the simulator's tracks and
// event names, and metadata with the plan, model and measured totals.
// Collectives over host floats on whichever world the run has (MPI directly; NCCL through device
// staging), so the CPU and GPU paths share the gathering below.
struct HostCollectives {
  std::function<void(float* data, int64_t n)> all_reduce_max;
  std::function<void(float* out, const float* in, int64_t n)> all_gather;
};

// The last step's ops of every stage's representative rank (TP 0, DP 0), on world rank 0 (empty
// elsewhere). Every rank must call it.
std::vector<StageOp> gather_stage_ops(const Plan& plan, const RankCoords& me, int world_rank, int world_size,
                                      const std::vector<OpRecord>& ops, const HostCollectives& c);

nlohmann::json measured_trace(const StepProgram& program, const ModelSpec& m, const std::vector<StageOp>& ops,
                              const nlohmann::json& metadata);

// Errors every rank sees alike end every rank with exit 2; rank 0 says why (defined in train_main.cc).
[[noreturn]] void fail_all(Communicator& world, const std::string& message);

// `train --device cuda`: runs the plan on GPUs (or emulates one rank); returns the exit code.
int run_gpu_training(const TrainFlags& flags, const ModelSpec& m, const Plan& plan, const TrainOptions& options,
                     Communicator& cpu_world);

}  // namespace parallax
