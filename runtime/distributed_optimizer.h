// DistributedOptimizer: ZeRO-1 and ZeRO-2 for the CPU runtime. The DP group splits the flattened
// parameters of a rank into equal shards; each DP rank keeps the AdamW moments and master copy of
// its shard only, receives its shard's summed gradients by reduce-scatter (ZeRO-1 once per step,
// ZeRO-2 after every micro-batch so the full gradient never has to outlive it), updates the shard
// and all-gathers the updated parameters.
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

 private:
  std::vector<Param*> params_;
  Communicator& dp_;
  std::vector<int64_t> offset_;  // of each parameter in the flat vector
  std::vector<char> counted_;    // per flat element of the shard
  int64_t shard_ = 0;
  Buffer master_, m_, v_, grad_;  // this rank's shard
};

}  // namespace parallax
