// Trainer: executes a Plan on this process's rank — the rank order of DESIGN.md (TP innermost,
// then DP, then PP), process groups split from the world communicator, deterministic synthetic
// data split over DP, gradient accumulation over micro-batches, DP gradient all-reduce, global
// gradient-norm clipping across ranks and AdamW. Every parallel plan computes the same losses as
// one rank (up to fp32 summation order).
//
// Pipeline parallelism executes planner/schedule.h's op list for this stage (GPipe, 1F1B,
// interleaved, ZB-H1) with asynchronous sends and tagged receives. Implemented so far: TP (with
// vocab-parallel embedding and loss, sequence parallelism), PP, DP, ZeRO-1/2/3, full and selective
// recompute, ZeRO-3 (parameters gathered around every op), gradient accumulation; the math is
// fp32 (fp16 plans add dynamic loss scaling and step skipping on overflow); ZB-H1's W
// ops are empty (B computes the weight gradients too). Other settings are refused by
// check_runtime_support().
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "kernels/adamw.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "runtime/communicator.h"
#include "runtime/distributed_optimizer.h"
#include "runtime/transformer.h"

namespace parallax {

struct TrainOptions {
  uint64_t seed = 1234;       // parameters
  uint64_t data_seed = 42;    // synthetic tokens
  kernels::AdamWConfig adam;
  float clip_norm = 1.0f;
  std::vector<int> data;      // token stream to train on; empty: synthetic tokens
  int64_t inject_overflow_step = -1;  // test hook: an inf in one rank's gradients at this step
  int64_t skip_step = -1;             // test hook: skip this step's update as an overflow would
};

// Reads a training file: whitespace-separated token ids if it holds only those, else its bytes
// as tokens (0-255). Errors name the file, or the first id outside [0, vocab).
Result<std::vector<int>> read_token_file(const std::string& path, int64_t vocab);

// Rank coordinates from the world rank: tp = r % t, dp = (r / t) % d, pp = r / (t d).
struct RankCoords {
  int tp = 0, dp = 0, pp = 0;
};
RankCoords rank_coords(const Plan& plan, int world_rank);

// The settings of `plan` this runtime can execute, or an error naming the first one it cannot.
Status check_runtime_support(const Plan& plan);

// Token `pos` (0..s) of global sequence `seq` at `step`: deterministic, independent of the plan.
int synthetic_token(uint64_t data_seed, int64_t step, int64_t seq, int64_t pos, int64_t vocab);

// Inputs and targets (s each) of global sequence `seq` at `step`: consecutive windows of
// options.data (wrapping around), or synthetic tokens. The same for every plan and runtime.
void sequence_tokens(const TrainOptions& options, int64_t vocab, int64_t global_batch, int64_t seq_len, int64_t step,
                     int64_t seq, int* inputs, int* targets);

// One measured op of a step on this rank, in seconds from the step's start (after a barrier over
// all ranks).
struct OpRecord {
  enum Kind { kForward, kBackward, kRecv, kDpAllReduce, kDpReduceScatter, kOptimizer };
  Kind kind;
  int micro_batch = -1, chunk = -1;
  double start_s = 0, duration_s = 0;
  // The trace format's canonical name ("F mb=3 chunk=0", "recv pp mb=3", "optimizer", ...).
  std::string name() const;
  const char* stream() const;  // compute | pp-recv | dp
};

struct StepStats {
  double loss = 0;       // mean token loss over the global batch
  double grad_norm = 0;  // before clipping (unscaled)
  bool skipped = false;  // inf/NaN gradients on some rank: no update on any rank
  double loss_scale = 1;
};

// Dynamic loss scaling for fp16 (Micikevicius et al.): gradients are computed for loss x scale;
// an overflow anywhere skips the step on every rank and halves the scale; every 2,000 clean
// steps double it. Other precisions keep the scale at 1.
struct LossScaler {
  static constexpr float kInitial = 65536.0f, kBackoff = 0.5f, kGrowth = 2.0f;
  static constexpr int64_t kGrowthInterval = 2000;
  float scale = 1.0f;
  int64_t clean_steps = 0;
  void update(bool overflow);
};

class Trainer {
 public:
  // `world` must outlive the trainer; its size must equal plan.gpus().
  static Result<std::unique_ptr<Trainer>> create(const ModelSpec& m, const Plan& plan, Communicator& world,
                                                 const TrainOptions& options);
  StepStats step(int64_t step_index);
  // Bytes this rank sent, per group kind.
  int64_t tp_bytes() const { return tp_->bytes_sent(); }
  int64_t dp_bytes() const { return dp_->bytes_sent(); }
  int64_t pp_bytes() const { return pp_->bytes_sent(); }
  const RankCoords& coords() const { return coords_; }
  int64_t updates() const { return updates_; }
  // This rank's training state (parameters, optimizer moments, update count) as bytes, and back.
  // The data position is the step index (synthetic and file data are a function of it).
  std::string save_state();
  Status load_state(const std::string& bytes);
  // The ops of the last step, measured with a steady clock.
  const std::vector<OpRecord>& last_step_ops() const { return records_; }

 private:
  Trainer(const ModelSpec& m, const Plan& plan, const TrainOptions& o, Transformer model)
      : m_(m), plan_(plan), options_(o), model_(std::move(model)) {}
  double run_micro_batches(int64_t step_index);
  void fill_batch(int64_t step_index, int64_t mb, std::vector<int>& inputs, std::vector<int>& targets) const;
  int tag(OpKind kind, int64_t mb, int64_t receiver_vs) const;
  void sync_tied_embedding();
  void reduce_gradients(std::vector<Param*>& params, int64_t step_index);
  double gradient_norm();
  bool counted(const Param* p);

  ModelSpec m_;
  Plan plan_;
  TrainOptions options_;
  Transformer model_;
  RankCoords coords_;
  std::unique_ptr<Communicator> tp_, dp_, pp_, embedding_;  // embedding_: first + last stage
  std::vector<Buffer> adam_m_, adam_v_;          // ZeRO 0
  std::unique_ptr<DistributedOptimizer> zero_;  // ZeRO 1 and 2
  int64_t updates_ = 0;
  LossScaler scaler_;
  std::vector<OpRecord> records_;
  std::function<void()> world_barrier_;
  std::chrono::steady_clock::time_point step_start_;
  void record(OpRecord::Kind kind, int mb, int chunk, std::chrono::steady_clock::time_point begin);
};

}  // namespace parallax
