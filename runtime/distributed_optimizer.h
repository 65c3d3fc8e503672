// DistributedOptimizer: ZeRO-1, 2 and 3 for the CPU runtime. The rank's flat parameters are cut
// into the step program's gradient buckets (runtime/flat_layout.h); each bucket is split into dp
// equal pieces (padded), and each DP rank keeps the AdamW moments and fp32 master copy of its piece
// of every bucket — Megatron's distributed-optimizer layout. A bucket's gradients reach their
// owners by one reduce-scatter (ZeRO-1 once per step, ZeRO-2/3 after every micro-batch so the full
// gradient never outlives it); updated weights come back by one all-gather per bucket. ZeRO-3 keeps
// no full parameters between ops: the trainer gathers them before each forward or backward and
// releases them after.
#pragma once

#include <functional>
#include <vector>

#include "kernels/adamw.h"
#include "runtime/communicator.h"
#include "runtime/flat_layout.h"

namespace parallax {

class DistributedOptimizer {
 public:
  // `counted(p)`: whether p's gradient enters this rank's share of the global norm (a parameter
  // replicated over TP counts on one TP rank only); `decays(p)`: whether AdamW's weight decay
  // applies to p. `layout` must outlive the optimizer.
  DistributedOptimizer(const FlatLayout& layout, Communicator& dp, std::function<bool(const Param*)> counted,
                       std::function<bool(const Param*)> decays);

  // Reduce-scatters bucket b's gradients into this rank's piece (adding to what is there) and
  // zeroes them; reduce_gradients() does every bucket.
  void reduce_bucket(int64_t b);
  void reduce_gradients();
  // Sum of squares of this rank's counted gradient elements.
  double shard_sumsq() const;
  // AdamW on the pieces with gradients scaled by `grad_scale`; clears their gradients. The
  // parameters change only when gathered.
  void step(const kernels::AdamWConfig& cfg, int step, float grad_scale);
  // All-gathers bucket b's parameters from the pieces into Param::value; gather_parameters() every
  // bucket; release_parameters() frees every Param::value (ZeRO-3).
  void gather_bucket(int64_t b);
  void gather_parameters();
  void release_parameters();
  // Drops the pieces' gradients (a skipped step).
  void discard_gradients();
  // Checkpoints: every layout parameter's whole master copy and moments (all-gathered over DP;
  // every DP rank takes part), in layout.params() order; and this rank's pieces set from them.
  struct ParamState {
    std::vector<Buffer> value, m, v;
  };
  ParamState gather_state();
  void set_state(const ParamState& s);

 private:
  int64_t piece(int64_t b) const;  // elements per rank of bucket b (padded)

  const FlatLayout& layout_;
  Communicator& dp_;
  std::vector<int64_t> at_;   // where bucket b's piece starts in this rank's arrays
  std::vector<char> counted_, decays_;  // per element of the pieces
  Buffer master_, m_, v_, grad_;
};

}  // namespace parallax
