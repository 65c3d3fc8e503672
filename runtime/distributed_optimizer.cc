#include "runtime/distributed_optimizer.h"

#include <algorithm>

namespace parallax {

DistributedOptimizer::DistributedOptimizer(const FlatLayout& layout, Communicator& dp,
                                           std::function<bool(const Param*)> counted)
    : layout_(layout), dp_(dp) {
  int64_t total = 0;
  for (int64_t b = 0; b < layout.buckets(); ++b) at_.push_back(total), total += piece(b);
  master_.assign(total, 0.0f), m_.assign(total, 0.0f), v_.assign(total, 0.0f), grad_.assign(total, 0.0f);
  counted_.assign(total, 0);
  for (int64_t b = 0; b < layout.buckets(); ++b) {
    const ElementRange r = layout.bucket(b);
    const int64_t lo = r.begin + dp.rank() * piece(b), hi = std::min(r.end, lo + piece(b));
    if (lo >= hi) continue;
    layout.copy_values({lo, hi}, master_.data() + at_[b]);
    for (int64_t e = lo; e < hi; ++e) counted_[at_[b] + e - lo] = counted(layout.param_at(e)) ? 1 : 0;
  }
}

int64_t DistributedOptimizer::piece(int64_t b) const {
  const ElementRange r = layout_.bucket(b);
  return (r.end - r.begin + dp_.size() - 1) / dp_.size();
}

void DistributedOptimizer::reduce_bucket(int64_t b) {
  const ElementRange r = layout_.bucket(b);
  const int64_t n = piece(b);
  Buffer flat(n * dp_.size(), 0.0f), mine(n);
  layout_.copy_grads(r, flat.data());
  layout_.zero_grads(r);
  dp_.reduce_scatter(mine.data(), flat.data(), n);
  for (int64_t e = 0; e < n; ++e) grad_[at_[b] + e] += mine[e];
}

void DistributedOptimizer::reduce_gradients() {
  for (int64_t b = 0; b < layout_.buckets(); ++b) reduce_bucket(b);
}

double DistributedOptimizer::shard_sumsq() const {
  double s = 0;
  for (size_t e = 0; e < grad_.size(); ++e)
    if (counted_[e]) s += static_cast<double>(grad_[e]) * grad_[e];
  return s;
}

void DistributedOptimizer::step(const kernels::AdamWConfig& cfg, int step, float grad_scale) {
  kernels::adamw_update(master_.data(), grad_.data(), m_.data(), v_.data(), static_cast<long>(master_.size()), cfg,
                        step, grad_scale);
  std::fill(grad_.begin(), grad_.end(), 0.0f);
}

void DistributedOptimizer::discard_gradients() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

void DistributedOptimizer::gather_bucket(int64_t b) {
  const ElementRange r = layout_.bucket(b);
  const int64_t n = piece(b);
  Buffer flat(n * dp_.size());
  dp_.all_gather(flat.data(), master_.data() + at_[b], n);
  layout_.set_values(r, flat.data());
}

void DistributedOptimizer::gather_parameters() {
  for (int64_t b = 0; b < layout_.buckets(); ++b) gather_bucket(b);
}

void DistributedOptimizer::release_parameters() {
  for (Param* p : layout_.params()) Buffer().swap(p->value);
}

}  // namespace parallax
