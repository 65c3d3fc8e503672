// GpuTrainer: executes a Plan on this process's GPU — the same StepProgram as the CPU Trainer,
// through the same step executor (runtime/step_executor.h: the same data, losses, gradient
// clipping, AdamW and dynamic loss scaling), on a GpuModel in the plan's precision (bf16 or fp16
// with fp32 master weights and gradients; fp32 for checks).
//
// Streams: the model runs on a compute stream; the program's gradient collectives run on a DP
// stream once the compute stream has reached them — with overlap_grad_reduce, the DP buckets (ZeRO
// 0 and 1) as soon as the last backward has left their layers. Per-op times come from CUDA events, under the
// program's names; memory from the caching DeviceAllocator's high-water mark.
//
// Real ranks: TP, PP (one model chunk per stage; GPipe, 1F1B and ZB-H1, sends grouped with the
// next receive from the same neighbour — program/pipeline_exchange.h) and DP over NCCL, ZeRO 0
// (the program's all-reduce buckets) or 1 (per bucket a reduce-scatter, AdamW on this rank's piece
// of every bucket of the fp32 masters and moments — the CPU runtime's layout — and per bucket an
// all-gather of the 16-bit weights). Rank emulation (`emulate_rank` >= 0): one GPU runs rank R's
// share of any plan — its stage of the pipeline with the schedule's op order, its TP shard, its
// micro-batches — with stand-in collectives (runtime/cuda/stand_in_communicator.h), so per-rank
// compute time and memory of plans far larger than one GPU can be measured. Other settings are refused by check_gpu_support().
#pragma once

#include <memory>
#include <vector>

#include "models/model_spec.h"
#include "program/plan.h"
#include "runtime/cuda/device_communicator.h"
#include "runtime/trainer.h"

namespace parallax {

struct GpuTrainOptions {
  TrainOptions train;
  int emulate_rank = -1;     // >= 0: emulate this rank of the plan on one GPU
  bool exact_init = true;    // the CPU runtime's initialization (else a fast on-device fill)
  // Real ranks of a world of several: a host that cannot issue its next op for this long (its
  // launch queue full behind a collective waiting on a failed peer) ends the rank with exit 3.
  double watchdog_s = 60;
};


class GpuTrainer {
 public:
  // `world` (real ranks) must outlive the trainer; it is unused when emulating (may be null).
  static Result<std::unique_ptr<GpuTrainer>> create(const ModelSpec& m, const Plan& plan, DeviceCommunicator* world,
                                                    const GpuTrainOptions& options);
  virtual ~GpuTrainer() = default;
  // Errors: a CUDA, cuBLAS or NCCL failure, named; the rank cannot go on.
  Result<StepStats> step(int64_t step_index);
  // The ops of the last step (CUDA events), seconds from the step's start.
  virtual const std::vector<OpRecord>& last_step_ops() const = 0;
  // The step program this rank executes (its ops name the records).
  virtual const StepProgram& program() const = 0;
  // High-water mark of the caching allocator plus the cuBLASLt workspace.
  virtual int64_t peak_memory_bytes() const = 0;
  virtual int64_t tp_bytes() const = 0;
  virtual int64_t pp_bytes() const = 0;
  virtual int64_t dp_bytes() const = 0;
  virtual const RankCoords& coords() const = 0;

 private:
  virtual StepStats run_step(int64_t step_index) = 0;  // throws on a device failure
};

}  // namespace parallax
