// Trainer: executes a Plan on this process's rank of the CPU runtime — the StepProgram of its
// pipeline stage (program/step_program.h) through the step executor (step_executor.h): F and B on the sharded
// Transformer (ZB-H1: B the input gradients, W later the parameter gradients),
// pipeline sends (asynchronous) and receives (tagged, blocking), DP gradient buckets (all-reduce,
// or ZeRO-1/2/3 reduce-scatter), ZeRO weight gathers, the SP norm and tied-embedding gradient
// sums, and the optimizer op. Groups come from the RankGrid. Every parallel
// plan computes the same losses as one rank (up to fp32 summation order). Each op is timed with a
// steady clock and reported under the program's name, so the trace matches the simulator's.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "kernels/adamw.h"
#include "program/plan.h"
#include "program/runtime_support.h"
#include "program/step_program.h"
#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "runtime/distributed_optimizer.h"
#include "runtime/flat_layout.h"
#include "runtime/optimizer_step.h"
#include "runtime/step_executor.h"
#include "runtime/timed_communicator.h"
#include "runtime/transformer.h"
#include "runtime/transformer_cache.h"

namespace parallax {

struct TrainOptions {
  uint64_t seed = 1234;       // parameters
  uint64_t data_seed = 42;    // synthetic tokens
  kernels::AdamWConfig adam;
  bool decay_norms_and_biases = false;  // weight decay on them too (Megatron's default: no)
  float clip_norm = 1.0f;
  std::vector<int> data;      // token stream to train on; empty: synthetic tokens
  int64_t inject_overflow_step = -1;  // test hook: an inf in one rank's gradients at this step
  int64_t skip_step = -1;             // test hook: skip this step's update as an overflow would
};

// Reads a training file: whitespace-separated token ids if it holds only those, else its bytes
// as tokens (0-255). Errors name the file, or the first id outside [0, vocab).
Result<std::vector<int>> read_token_file(const std::string& path, int64_t vocab);


// Token `pos` (0..s) of global sequence `seq` at `step`: deterministic, independent of the plan.
int synthetic_token(uint64_t data_seed, int64_t step, int64_t seq, int64_t pos, int64_t vocab);

// Inputs and targets (s each) of global sequence `seq` at `step`: consecutive windows of
// options.data (wrapping around), or synthetic tokens. The same for every plan and runtime.
void sequence_tokens(const TrainOptions& options, int64_t vocab, int64_t global_batch, int64_t seq_len, int64_t step,
                     int64_t seq, int* inputs, int* targets);

// One measured op of a step on this rank, in seconds from the step's start (after a barrier over
// all ranks): program op `op` of the rank's stage, or (tp) the TP collectives inside it.
struct OpRecord {
  int32_t op = -1;
  bool tp = false;
  double start_s = 0, duration_s = 0;
};
// The record's trace name and track, from the program.
std::string record_name(const StageProgram& stage, const OpRecord& r);
StreamKind record_stream(const StageProgram& stage, const OpRecord& r);

class Trainer : private StepBackend {
 public:
  // `world` must outlive the trainer; its size must equal plan.gpus().
  static Result<std::unique_ptr<Trainer>> create(const ModelSpec& m, const Plan& plan, Communicator& world,
                                                 const TrainOptions& options);
  StepStats step(int64_t step_index);
  // Bytes this rank sent, per group kind.
  int64_t tp_bytes() const { return tp_->bytes_sent(); }
  int64_t dp_bytes() const { return dp_->bytes_sent(); }
  int64_t pp_bytes() const { return pp_->bytes_sent(); }
  int64_t cp_bytes() const { return cp_->bytes_sent(); }
  const RankCoords& coords() const { return coords_; }
  int64_t updates() const { return updates_; }
  // Checkpoints (runtime/checkpoint.h): the shards of the parameters this rank owns — one replica
  // of each — with their AdamW moments (collective: ZeRO gathers its pieces over DP); and this
  // rank's parameters, moments, update count and loss scale taken from a checkpoint of any plan
  // of the same model. The data position is the step index (synthetic and file data are a
  // function of it).
  std::vector<TensorShard> export_state();
  Status import_state(const CheckpointTensors& tensors, int64_t updates, const LossScaler& scaler);
  const LossScaler& loss_scaler() const { return scaler_; }
  // The ops of the last step, measured with a steady clock.
  const std::vector<OpRecord>& last_step_ops() const { return records_; }
  const StepProgram& program() const { return program_; }

 private:
  Trainer(const ModelSpec& m, const Plan& plan, const TrainOptions& o, Transformer model)
      : m_(m), plan_(plan), options_(o), model_(std::move(model)), program_(build_step_program(m, plan)) {}
  // StepBackend: this rank's share of each program op.
  void compute(const ProgramOp& op) override;
  void send(const ProgramOp& op) override;
  void recv(const ProgramOp& op) override;
  void collective(const ProgramOp& op) override;
  double loss_sum() override;
  double gradient_sumsq() override;
  void apply_update(float grad_scale, int update) override;
  void discard_gradients() override;
  void op_begin(size_t index, const ProgramOp& op) override;
  void op_end(size_t index, const ProgramOp& op) override;
  void fill_batch(int64_t step_index, int64_t mb, std::vector<int>& inputs, std::vector<int>& targets) const;
  int tag(OpKind kind, int64_t mb, int64_t receiver_vs) const;
  bool counted(const Param* p);
  bool owns(const Param* p) const;  // writes p to checkpoints
  void create_optimizers(const Plan& plan);
  bool sharded(const Param* p) const;  // p's optimizer state is a DistributedOptimizer's
  Param* tied_embedding();
  bool per_pass_shards() const;  // ZeRO-2/3: each pass's gradients go to the shards
  void release_parameters();
  std::vector<int64_t> chunk_buckets(int64_t chunk) const;

  ModelSpec m_;
  Plan plan_;
  TrainOptions options_;
  Transformer model_;
  StepProgram program_;
  RankCoords coords_;
  std::unique_ptr<TimedCommunicator> tp_;
  std::unique_ptr<Communicator> dp_, pp_, embedding_;  // embedding_: first + last stage
  std::unique_ptr<Communicator> cp_;                  // the ranks sharing each sequence
  std::unique_ptr<Communicator> ep_, expert_dp_;      // EP: token exchange; the ranks holding the same experts
  std::unique_ptr<FlatLayout> layout_;
  std::vector<Buffer> adam_m_, adam_v_;          // per parameter; empty where an optimizer shards it
  std::unique_ptr<DistributedOptimizer> zero_;  // ZeRO 1, 2 and 3 over more than one data rank
  std::unique_ptr<FlatLayout> expert_layout_;    // EP with ZeRO: the experts, one bucket per chunk
  std::unique_ptr<DistributedOptimizer> expert_zero_;
  std::map<int64_t, Transformer::MicroBatch> states_;  // by mb * v + chunk
  Buffer in_, out_;     // this op's input and output at the stage boundary
  Buffer tied_grad_;    // ZeRO-2/3 with a tied embedding: its gradient until the embedding all-reduce
  double loss_ = 0;     // summed token loss of this step's micro-batches (last stage)
  int64_t updates_ = 0;
  LossScaler scaler_;
  std::vector<OpRecord> records_;
  std::function<void()> world_barrier_;
  std::chrono::steady_clock::time_point step_start_, op_start_;
  int64_t step_index_ = 0;  // of the step being executed
};

}  // namespace parallax
