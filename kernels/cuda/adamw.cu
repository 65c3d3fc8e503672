// CUDA AdamW on fp32 master weights (kernels/cuda/adamw.h), optionally writing the 16-bit compute
// copy of the updated weights in the same pass (one read of the master weights instead of two).
//
// The update is bit-identical to kernels/cpu/adamw.cc: the bias corrections come from the same
// host std::pow, and the per-element formula uses the IEEE round-to-nearest intrinsics in the CPU's
// order of operations, which keeps nvcc from contracting a*b+c into FMAs the CPU does not do.
#include "kernels/cuda/adamw.h"

#include <cmath>

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

using detail::kPack;

// Host-side constants of one step, computed exactly as the CPU reference computes them.
struct Step {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, c1, c2, grad_scale;
};

Step make_step(const AdamWConfig& cfg, int step, float grad_scale) {
  return {cfg.lr,
          cfg.beta1,
          cfg.beta2,
          1.0f - cfg.beta1,
          1.0f - cfg.beta2,
          cfg.eps,
          cfg.weight_decay,
          1.0f - std::pow(cfg.beta1, static_cast<float>(step)),
          1.0f - std::pow(cfg.beta2, static_cast<float>(step)),
          grad_scale};
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; p -= lr (m / c1 / (sqrt(v / c2) + eps) + wd p).
__device__ __forceinline__ void update(float& p, float grad, float& m, float& v, const Step& s) {
  const float g = __fmul_rn(grad, s.grad_scale);
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  const float mhat = __fdiv_rn(m, s.c1), vhat = __fdiv_rn(v, s.c2);
  const float ratio = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), s.eps));
  p = __fsub_rn(p, __fmul_rn(s.lr, __fadd_rn(ratio, __fmul_rn(s.weight_decay, p))));
}

// V fp32 elements per thread (four: one 16-byte access of each fp32 array); T is the compute copy's
// type, written only when compute_copy is non-null.
template <class T, int V>
__global__ void adamw_kernel(float* __restrict__ param, T* __restrict__ compute_copy, const float* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, long n, Step s) {
  for (long i = detail::thread_index() * V; i < n; i += detail::grid_threads() * V) {
    float pv[V], gv[V], mv[V], vv[V];
    detail::load<V>(pv, param + i);
    detail::load<V>(gv, grad + i);
    detail::load<V>(mv, m + i);
    detail::load<V>(vv, v + i);
#pragma unroll
    for (int k = 0; k < V; ++k) update(pv[k], gv[k], mv[k], vv[k], s);
    detail::store<V>(param + i, pv);
    detail::store<V>(m + i, mv);
    detail::store<V>(v + i, vv);
    if (compute_copy) detail::store<V>(compute_copy + i, pv);
  }
}

template <class T>
void launch(float* param, T* compute_copy, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg,
            int step, float grad_scale) {
  if (n <= 0) return;
  const Step s = make_step(cfg, step, grad_scale);
  constexpr int V = kPack<float>;
  // One 16-byte test for all five arrays: a 16-bit compute copy's pack needs only 8, so a copy at
  // an odd 8-byte offset merely takes the scalar path.
  if (detail::packable<float>({param, compute_copy, grad, m, v}, {n}))
    adamw_kernel<T, V><<<detail::grid_for(n / V), detail::kBlock, 0, stream()>>>(param, compute_copy, grad, m, v, n, s);
  else
    adamw_kernel<T, 1><<<detail::grid_for(n), detail::kBlock, 0, stream()>>>(param, compute_copy, grad, m, v, n, s);
  check_launch("adamw_update");
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg, int step,
                  float grad_scale) {
  launch<float>(param, nullptr, grad, m, v, n, cfg, step, grad_scale);
}

template <class T>
void adamw_update(float* param, T* compute_copy, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg,
                  int step, float grad_scale) {
  launch<T>(param, compute_copy, grad, m, v, n, cfg, step, grad_scale);
}

template void adamw_update<float>(float*, float*, const float*, float*, float*, long, const AdamWConfig&, int, float);
template void adamw_update<bf16>(float*, bf16*, const float*, float*, float*, long, const AdamWConfig&, int, float);
template void adamw_update<fp16>(float*, fp16*, const float*, float*, float*, long, const AdamWConfig&, int, float);

}  // namespace parallax::kernels::cuda
