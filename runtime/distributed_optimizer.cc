#include "runtime/distributed_optimizer.h"

#include <algorithm>
#include <limits>

namespace parallax {

DistributedOptimizer::DistributedOptimizer(std::vector<Param*> params, Communicator& dp,
                                           std::function<bool(const Param*)> counted)
    : params_(std::move(params)), dp_(dp) {
  int64_t total = 0;
  for (Param* p : params_) {
    offset_.push_back(total);
    total += p->size;
  }
  const int64_t d = dp.size();
  shard_ = (total + d - 1) / d;
  const int64_t lo = dp.rank() * shard_;
  master_.assign(shard_, 0.0f);
  m_.assign(shard_, 0.0f);
  v_.assign(shard_, 0.0f);
  grad_.assign(shard_, 0.0f);
  counted_.assign(shard_, 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t begin = std::max(offset_[i], lo), end = std::min<int64_t>(offset_[i] + params_[i]->size, lo + shard_);
    for (int64_t e = begin; e < end; ++e) {
      master_[e - lo] = params_[i]->value[e - offset_[i]];
      counted_[e - lo] = counted(params_[i]) ? 1 : 0;
    }
  }
}

void DistributedOptimizer::reduce_gradients() {
  Buffer flat(shard_ * dp_.size(), 0.0f), mine(shard_);
  for (size_t i = 0; i < params_.size(); ++i) {
    std::copy(params_[i]->grad.begin(), params_[i]->grad.end(), flat.begin() + offset_[i]);
    std::fill(params_[i]->grad.begin(), params_[i]->grad.end(), 0.0f);
  }
  dp_.reduce_scatter(mine.data(), flat.data(), shard_);
  for (int64_t e = 0; e < shard_; ++e) grad_[e] += mine[e];
}

double DistributedOptimizer::shard_sumsq() const {
  double s = 0;
  for (int64_t e = 0; e < shard_; ++e)
    if (counted_[e]) s += static_cast<double>(grad_[e]) * grad_[e];
  return s;
}

void DistributedOptimizer::step(const kernels::AdamWConfig& cfg, int step, float grad_scale) {
  kernels::adamw_update(master_.data(), grad_.data(), m_.data(), v_.data(), static_cast<long>(shard_), cfg, step,
                        grad_scale);
  std::fill(grad_.begin(), grad_.end(), 0.0f);
  if (keep_parameters_) gather_parameters();
}

void DistributedOptimizer::discard_gradients() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

void DistributedOptimizer::poison_gradient() {
  if (!grad_.empty()) grad_[0] = std::numeric_limits<float>::infinity();
}

void DistributedOptimizer::gather_parameters() {
  Buffer flat(shard_ * dp_.size());
  dp_.all_gather(flat.data(), master_.data(), shard_);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i]->value.assign(flat.begin() + offset_[i], flat.begin() + offset_[i] + params_[i]->size);
}

void DistributedOptimizer::release_parameters() {
  for (Param* p : params_) Buffer().swap(p->value);
}

}  // namespace parallax
