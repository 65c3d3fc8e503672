#include "runtime/distributed_optimizer.h"

#include <algorithm>

namespace parallax {

DistributedOptimizer::DistributedOptimizer(const FlatLayout& layout, Communicator& dp,
                                           std::function<bool(const Param*)> counted,
                                           std::function<bool(const Param*)> decays)
    : layout_(layout), dp_(dp) {
  int64_t total = 0;
  for (int64_t b = 0; b < layout.buckets(); ++b) at_.push_back(total), total += piece(b);
  master_.assign(total, 0.0f), m_.assign(total, 0.0f), v_.assign(total, 0.0f), grad_.assign(total, 0.0f);
  counted_.assign(total, 0), decays_.assign(total, 0);
  for (int64_t b = 0; b < layout.buckets(); ++b) {
    const ElementRange r = layout.bucket(b);
    const int64_t lo = r.begin + dp.rank() * piece(b), hi = std::min(r.end, lo + piece(b));
    if (lo >= hi) continue;
    layout.copy_values({lo, hi}, master_.data() + at_[b]);
    for (int64_t e = lo; e < hi; ++e) {
      const Param* p = layout.param_at(e);
      counted_[at_[b] + e - lo] = counted(p) ? 1 : 0;
      decays_[at_[b] + e - lo] = decays(p) ? 1 : 0;
    }
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
  kernels::AdamWConfig no_decay = cfg;
  no_decay.weight_decay = 0;
  const size_t n = master_.size();
  for (size_t begin = 0, end = 0; begin < n; begin = end) {  // runs of elements alike in decay
    while (end < n && decays_[end] == decays_[begin]) ++end;
    kernels::adamw_update(master_.data() + begin, grad_.data() + begin, m_.data() + begin, v_.data() + begin,
                          static_cast<long>(end - begin), decays_[begin] ? cfg : no_decay, step, grad_scale);
  }
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

DistributedOptimizer::ParamState DistributedOptimizer::gather_state() {
  ParamState s;
  for (std::vector<Buffer>* to : {&s.value, &s.m, &s.v})
    for (const Param* p : layout_.params()) to->emplace_back(p->size, 0.0f);
  for (int64_t b = 0; b < layout_.buckets(); ++b) {
    const int64_t n = piece(b);
    Buffer flat(n * dp_.size());
    for (auto [from, to] : {std::pair{&master_, &s.value}, std::pair{&m_, &s.m}, std::pair{&v_, &s.v}}) {
      dp_.all_gather(flat.data(), from->data() + at_[b], n);
      layout_.copy_into(layout_.bucket(b), flat.data(), *to);
    }
  }
  return s;
}

void DistributedOptimizer::set_state(const ParamState& s) {
  for (int64_t b = 0; b < layout_.buckets(); ++b) {
    const ElementRange r = layout_.bucket(b);
    const int64_t lo = r.begin + dp_.rank() * piece(b), hi = std::min(r.end, lo + piece(b));
    if (lo >= hi) continue;
    layout_.copy_from({lo, hi}, s.value, master_.data() + at_[b]);
    layout_.copy_from({lo, hi}, s.m, m_.data() + at_[b]);
    layout_.copy_from({lo, hi}, s.v, v_.data() + at_[b]);
  }
}

void DistributedOptimizer::release_parameters() {
  for (Param* p : layout_.params()) Buffer().swap(p->value);
}

}  // namespace parallax
