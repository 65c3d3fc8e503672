#include "runtime/flat_layout.h"

#include <algorithm>

namespace parallax {

FlatLayout::FlatLayout(std::vector<std::vector<Param*>> chunks, int64_t buckets_per_chunk) {
  for (const std::vector<Param*>& chunk : chunks) {
    const int64_t begin = total_;
    for (Param* p : chunk) {
      params_.push_back(p);
      offset_.push_back(total_);
      total_ += p->size;
    }
    for (int64_t k = 0; k < buckets_per_chunk; ++k) {
      const ElementRange r = bucket_range(total_ - begin, buckets_per_chunk, k);
      ranges_.push_back({begin + r.begin, begin + r.end});
    }
  }
}

template <class F>
void FlatLayout::visit(ElementRange r, F&& f) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t lo = std::max(r.begin, offset_[i]), hi = std::min(r.end, offset_[i] + params_[i]->size);
    if (lo < hi) f(i, lo - offset_[i], lo - r.begin, hi - lo);
  }
}

void FlatLayout::copy_grads(ElementRange r, float* out) const {
  visit(r, [&](size_t i, int64_t at, int64_t to, int64_t n) { std::copy_n(params_[i]->grad.data() + at, n, out + to); });
}
void FlatLayout::set_grads(ElementRange r, const float* in) const {
  visit(r, [&](size_t i, int64_t at, int64_t from, int64_t n) { std::copy_n(in + from, n, params_[i]->grad.data() + at); });
}
void FlatLayout::zero_grads(ElementRange r) const {
  visit(r, [&](size_t i, int64_t at, int64_t, int64_t n) { std::fill_n(params_[i]->grad.data() + at, n, 0.0f); });
}
void FlatLayout::copy_values(ElementRange r, float* out) const {
  visit(r, [&](size_t i, int64_t at, int64_t to, int64_t n) { std::copy_n(params_[i]->value.data() + at, n, out + to); });
}
void FlatLayout::set_values(ElementRange r, const float* in) const {
  visit(r, [&](size_t i, int64_t at, int64_t from, int64_t n) {
    Param& p = *params_[i];
    if (p.value.size() != static_cast<size_t>(p.size)) p.value.assign(p.size, 0.0f);  // released (ZeRO-3)
    std::copy_n(in + from, n, params_[i]->value.data() + at);
  });
}

void FlatLayout::copy_from(ElementRange r, const std::vector<Buffer>& per_param, float* out) const {
  visit(r, [&](size_t i, int64_t at, int64_t to, int64_t n) { std::copy_n(per_param[i].data() + at, n, out + to); });
}
void FlatLayout::copy_into(ElementRange r, const float* in, std::vector<Buffer>& per_param) const {
  visit(r, [&](size_t i, int64_t at, int64_t from, int64_t n) { std::copy_n(in + from, n, per_param[i].data() + at); });
}

const Param* FlatLayout::param_at(int64_t e) const {
  const auto it = std::upper_bound(offset_.begin(), offset_.end(), e);
  return params_[static_cast<size_t>(it - offset_.begin()) - 1];
}

}  // namespace parallax
