// CUDA vocab-parallel softmax cross-entropy (kernels/cuda/cross_entropy.h): one block per row of
// logits for the row statistics and the gradient, packed loads, fixed-order block reductions.
#include "kernels/cuda/cross_entropy.h"

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

using detail::block_reduce;
using detail::kPack;
using detail::load;
using detail::store;

template <class T, int V>
__global__ void __launch_bounds__(512) row_max_kernel(float* __restrict__ max, const T* __restrict__ logits, int v) {
  const T* l = logits + static_cast<long>(blockIdx.x) * v;
  float m = detail::Max::kIdentity;
  for (int j = threadIdx.x * V; j < v; j += blockDim.x * V) {
    float x[V];
    load<V>(x, l + j);
#pragma unroll
    for (int k = 0; k < V; ++k) m = fmaxf(m, x[k]);
  }
  m = block_reduce(m, detail::Max{});
  if (threadIdx.x == 0) max[blockIdx.x] = m;
}

template <class T, int V>
__global__ void __launch_bounds__(512)
    row_sum_exp_kernel(float* __restrict__ sum_exp, float* __restrict__ target_logit, const T* __restrict__ logits,
                       const float* __restrict__ max, const int* __restrict__ targets, int v, int vocab_start) {
  const long row = blockIdx.x;
  const T* l = logits + row * v;
  const float m = max[row];
  float s = 0.0f;
  for (int j = threadIdx.x * V; j < v; j += blockDim.x * V) {
    float x[V];
    load<V>(x, l + j);
#pragma unroll
    for (int k = 0; k < V; ++k) s += expf(x[k] - m);
  }
  s = block_reduce(s, detail::Sum{});
  if (threadIdx.x == 0) {
    const int col = targets[row] - vocab_start;
    sum_exp[row] = s;
    target_logit[row] = col >= 0 && col < v ? detail::to_f32(l[col]) : 0.0f;
  }
}

__global__ void loss_kernel(float* __restrict__ losses, const float* __restrict__ max,
                            const float* __restrict__ sum_exp, const float* __restrict__ target_logit, int n) {
  for (long i = detail::thread_index(); i < n; i += detail::grid_threads())
    losses[i] = logf(sum_exp[i]) + max[i] - target_logit[i];
}

// dlogits = (softmax - onehot) * dloss for one row per block, the target's -dloss folded into the
// same pass so every element is read once and written once by the same thread: that is what makes
// dlogits == logits safe. dloss comes per row (dloss_rows) or as one value for all rows; the fused
// form also writes the row's loss (losses non-null).
template <class T, int V>
__global__ void __launch_bounds__(512)
    softmax_gradient_kernel(T* dlogits, const T* logits, float* __restrict__ losses, const float* __restrict__ max,
                            const float* __restrict__ sum_exp, const float* __restrict__ target_logit,
                            const int* __restrict__ targets, const float* __restrict__ dloss_rows, float dloss, int v,
                            int vocab_start) {
  const long row = blockIdx.x;
  const T* l = logits + row * v;
  T* dl = dlogits + row * v;
  const float m = max[row], d = dloss_rows ? dloss_rows[row] : dloss, scale = d / sum_exp[row];
  const int col = targets[row] - vocab_start;  // outside [0, v) when another rank holds the target
  for (int j = threadIdx.x * V; j < v; j += blockDim.x * V) {
    float x[V];
    load<V>(x, l + j);
#pragma unroll
    for (int k = 0; k < V; ++k) x[k] = expf(x[k] - m) * scale - (j + k == col ? d : 0.0f);
    store<V>(dl + j, x);
  }
  if (losses && threadIdx.x == 0) losses[row] = logf(sum_exp[row]) + m - target_logit[row];
}

template <class T, int V>
void launch_softmax_gradient(float* losses, T* dlogits, const T* logits, const float* max, const float* sum_exp,
                             const float* target_logit, const int* targets, const float* dloss_rows, float dloss, int n,
                             int v, int vocab_start, const char* name) {
  softmax_gradient_kernel<T, V><<<n, detail::row_block(v / V), 0, stream()>>>(
      dlogits, logits, losses, max, sum_exp, target_logit, targets, dloss_rows, dloss, v, vocab_start);
  check_launch(name);
}

template <class T>
void softmax_gradient(float* losses, T* dlogits, const T* logits, const float* max, const float* sum_exp,
                      const float* target_logit, const int* targets, const float* dloss_rows, float dloss, int n, int v,
                      int vocab_start, const char* name) {
  if (n <= 0 || v <= 0) return;
  if (detail::packable<T>({dlogits, logits}, {v}))
    launch_softmax_gradient<T, kPack<T>>(losses, dlogits, logits, max, sum_exp, target_logit, targets, dloss_rows,
                                         dloss, n, v, vocab_start, name);
  else
    launch_softmax_gradient<T, 1>(losses, dlogits, logits, max, sum_exp, target_logit, targets, dloss_rows, dloss, n, v,
                                  vocab_start, name);
}

}  // namespace

template <class T>
void row_max(float* max, const T* logits, int n, int v) {
  if (n <= 0 || v <= 0) return;
  if (detail::packable<T>({logits}, {v}))
    row_max_kernel<T, kPack<T>><<<n, detail::row_block(v / kPack<T>), 0, stream()>>>(max, logits, v);
  else
    row_max_kernel<T, 1><<<n, detail::row_block(v), 0, stream()>>>(max, logits, v);
  check_launch("row_max");
}

template <class T>
void row_sum_exp_and_target(float* sum_exp, float* target_logit, const T* logits, const float* max, const int* targets,
                            int n, int v, int vocab_start) {
  if (n <= 0 || v <= 0) return;
  if (detail::packable<T>({logits}, {v}))
    row_sum_exp_kernel<T, kPack<T>><<<n, detail::row_block(v / kPack<T>), 0, stream()>>>(sum_exp, target_logit, logits,
                                                                                         max, targets, v, vocab_start);
  else
    row_sum_exp_kernel<T, 1>
        <<<n, detail::row_block(v), 0, stream()>>>(sum_exp, target_logit, logits, max, targets, v, vocab_start);
  check_launch("row_sum_exp_and_target");
}

void cross_entropy_loss(float* losses, const float* max, const float* sum_exp, const float* target_logit, int n) {
  if (n <= 0) return;
  loss_kernel<<<detail::grid_for(n), detail::kBlock, 0, stream()>>>(losses, max, sum_exp, target_logit, n);
  check_launch("cross_entropy_loss");
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const float* max, const float* sum_exp, const int* targets,
                            const float* dloss, int n, int v, int vocab_start) {
  softmax_gradient<T>(nullptr, dlogits, logits, max, sum_exp, nullptr, targets, dloss, 0.0f, n, v, vocab_start,
                      "cross_entropy_backward");
}

template <class T>
void cross_entropy_fused(float* losses, T* dlogits, const T* logits, const float* max, const float* sum_exp,
                         const float* target_logit, const int* targets, float dloss, int n, int v, int vocab_start) {
  softmax_gradient<T>(losses, dlogits, logits, max, sum_exp, target_logit, targets, nullptr, dloss, n, v, vocab_start,
                      "cross_entropy_fused");
}

#define PARALLAX_INSTANTIATE(T)                                                                                    \
  template void row_max<T>(float*, const T*, int, int);                                                            \
  template void row_sum_exp_and_target<T>(float*, float*, const T*, const float*, const int*, int, int, int);      \
  template void cross_entropy_backward<T>(T*, const T*, const float*, const float*, const int*, const float*, int, \
                                          int, int);                                                               \
  template void cross_entropy_fused<T>(float*, T*, const T*, const float*, const float*, const float*, const int*, \
                                       float, int, int, int);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
