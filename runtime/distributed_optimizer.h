// DistributedOptimizer: ZeRO-1, 2 and 3 for the CPU runtime. The DP group splits the flattened
// parameters of a rank into equal shards; each DP rank keeps the AdamW moments and master copy of
// its shard only, receives its shard's summed gradients by reduce-scatter (ZeRO-1 once per step,
// ZeRO-2 after every micro-batch so the full gradient never has to outlive it), updates the shard
// and all-gathers the updated parameters. ZeRO-3 keeps no full parameters between ops: the trainer
// gathers them before each forward or backward and releases them after.
#pragma once

#include <functional>
#include <vector>

#include "kernels/adamw.h"
#include "runtime/communicator.h"
#include "runtime/transformer.h"

namespace parallax {

class DistributedOptimizer {
 public:
  // `counted(p)`: whether p's gradient enters this rank's share of the global norm (a parameter
  // replicated over TP counts on one TP rank only).
  DistributedOptimizer(std::vector<Param*> params, Communicator& dp, std::function<bool(const Param*)> counted);

  // Reduce-scatters the parameters' gradients into this rank's shard (adding to what is there)
  // and zeroes them.
  void reduce_gradients();
  // Sum of squares of this rank's shard of counted gradients.
  double shard_sumsq() const;
  // AdamW on the shard with gradients scaled by `grad_scale`, then all-gather the parameters;
  // clears the shard's gradients.
  void step(const kernels::AdamWConfig& cfg, int step, float grad_scale);
  // ZeRO-3: all-gather the parameters from the shards into Param::value, and free them again.
  void gather_parameters();
  void release_parameters();
  void set_keep_parameters(bool keep) { keep_parameters_ = keep; }
  // Drops the shard's gradients (a skipped step); poisons one (a test hook for overflow).
  void discard_gradients();
  void poison_gradient();
  // The shard's state (master copy, moments) for checkpoints.
  std::vector<Buffer*> state() { return {&master_, &m_, &v_}; }

 private:
  std::vector<Param*> params_;
  Communicator& dp_;
  std::vector<int64_t> offset_;  // of each parameter in the flat vector
  std::vector<char> counted_;    // per flat element of the shard
  int64_t shard_ = 0;
  bool keep_parameters_ = true;  // false: ZeRO-3
  Buffer master_, m_, v_, grad_;  // this rank's shard
};

}  // namespace parallax
