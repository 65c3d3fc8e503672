// FlatLayout: a rank's parameters as one flat vector, chunk after chunk, cut into the gradient
// buckets of its StepProgram (program/step_program.h: bucket_range). Bucket b = c * n + k is the
// k-th of n equal ranges of chunk c's region. The DP reductions of both ZeRO-0 (all-reduce per
// bucket) and ZeRO-1/2/3 (reduce-scatter per bucket, DistributedOptimizer) move these ranges.
#pragma once

#include <cstdint>
#include <vector>

#include "program/step_program.h"
#include "runtime/transformer.h"

namespace parallax {

class FlatLayout {
 public:
  // `chunks`: each chunk's parameters, in order; `buckets_per_chunk` from dp_buckets_per_chunk.
  FlatLayout(std::vector<std::vector<Param*>> chunks, int64_t buckets_per_chunk);

  int64_t size() const { return total_; }
  int64_t buckets() const { return static_cast<int64_t>(ranges_.size()); }
  ElementRange bucket(int64_t b) const { return ranges_[b]; }
  const std::vector<Param*>& params() const { return params_; }

  // Copies gradients (or values) of flat range r into `out` / from `in`; zeroes gradients of r.
  void copy_grads(ElementRange r, float* out) const;
  void set_grads(ElementRange r, const float* in) const;
  void zero_grads(ElementRange r) const;
  void copy_values(ElementRange r, float* out) const;
  void set_values(ElementRange r, const float* in) const;
  // Flat range r of per-parameter buffers (one per params(), in that order) to `out`, and back.
  void copy_from(ElementRange r, const std::vector<Buffer>& per_param, float* out) const;
  void copy_into(ElementRange r, const float* in, std::vector<Buffer>& per_param) const;
  // The parameter holding flat element e.
  const Param* param_at(int64_t e) const;

 private:
  template <class F>
  void visit(ElementRange r, F&& f) const;  // f(param index, param offset, flat offset, count)

  std::vector<Param*> params_;
  std::vector<int64_t> offset_;  // of each parameter
  std::vector<ElementRange> ranges_;
  int64_t total_ = 0;
};

}  // namespace parallax
