// CUDA layernorm and rmsnorm, forward and backward (kernels/cuda/norm.h).
//
// One kernel serves both norms: rmsnorm is layernorm without centering (mean 0, no mean(g) term).
// Forward: one block per row, the row read in 16-byte packs; the mean and variance are two passes
// like the CPU reference (the second pass hits L1), so the variance never suffers the cancellation
// of E[x^2] - E[x]^2. Backward: each block walks a fixed set of rows, accumulating the parameter
// gradients of its rows in shared memory; the per-block partials are then summed in block order
// by a second kernel, so dweight and dbias are deterministic (no float atomics across rows).
#include "kernels/cuda/norm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

using detail::block_reduce;
using detail::kPack;
using detail::load;
using detail::store;
using detail::Sum;

template <class T, int V, bool kCentered>
__global__ void __launch_bounds__(512)
    norm_forward_kernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                        const T* __restrict__ inp, const T* __restrict__ weight, const T* __restrict__ bias, int c,
                        float eps) {
  const long row = blockIdx.x;
  const T* x = inp + row * c;
  T* y = out + row * c;
  const int first = threadIdx.x * V, step = blockDim.x * V;

  float m = 0.0f;
  if constexpr (kCentered) {
    float sum = 0.0f;
    for (int j = first; j < c; j += step) {
      float xv[V];
      load<V>(xv, x + j);
#pragma unroll
      for (int k = 0; k < V; ++k) sum += xv[k];
    }
    m = block_reduce(sum, Sum{}) / c;
  }
  float sq = 0.0f;
  for (int j = first; j < c; j += step) {
    float xv[V];
    load<V>(xv, x + j);
#pragma unroll
    for (int k = 0; k < V; ++k) sq += (xv[k] - m) * (xv[k] - m);
  }
  const float r = 1.0f / sqrtf(block_reduce(sq, Sum{}) / c + eps);

  for (int j = first; j < c; j += step) {
    float xv[V], wv[V], bv[V] = {};
    load<V>(xv, x + j);
    load<V>(wv, weight + j);
    if (bias) load<V>(bv, bias + j);
#pragma unroll
    for (int k = 0; k < V; ++k) xv[k] = (xv[k] - m) * r * wv[k] + bv[k];
    store<V>(y + j, xv);
  }
  if (threadIdx.x == 0) {
    if constexpr (kCentered) mean[row] = m;
    rstd[row] = r;
  }
}

// dx += r (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) r (uncentered: mean = 0
// and no mean(g) term). Thread t owns the same packs p = t + k blockDim of every row, so its
// dweight/dbias sums live in shared memory no other thread touches until the final write; they are
// stored element-major (index e * packs + p) so consecutive threads hit consecutive banks.
template <class T, int V, bool kCentered>
__global__ void __launch_bounds__(512)
    norm_backward_kernel(T* dinp, float* __restrict__ dw_partial, float* __restrict__ db_partial,
                         const T* __restrict__ dout, const T* __restrict__ inp, const T* __restrict__ weight,
                         const float* __restrict__ mean, const float* __restrict__ rstd, int n, int c) {
  extern __shared__ float acc[];  // dweight [c], then dbias [c] when db_partial
  float* dw_acc = acc;
  float* db_acc = acc + c;
  const int packs = c / V;
  for (int j = threadIdx.x; j < (db_partial ? 2 * c : c); j += blockDim.x) acc[j] = 0.0f;
  __syncthreads();

  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const float m = kCentered ? mean[row] : 0.0f, r = rstd[row];
    const T* x = inp + row * c;
    const T* dy = dout + row * c;
    T* dx = dinp + row * c;
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[V], dyv[V], wv[V];
      load<V>(xv, x + p * V);
      load<V>(dyv, dy + p * V);
      load<V>(wv, weight + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float g = dyv[k] * wv[k];
        g_sum += g;
        gx_sum += g * ((xv[k] - m) * r);
      }
    }
    const float g_mean = kCentered ? block_reduce(g_sum, Sum{}) / c : 0.0f;
    const float gx_mean = block_reduce(gx_sum, Sum{}) / c;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[V], dyv[V], wv[V], dxv[V];
      load<V>(xv, x + p * V);
      load<V>(dyv, dy + p * V);
      load<V>(wv, weight + p * V);
      load<V>(dxv, dx + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = (xv[k] - m) * r;
        dw_acc[k * packs + p] += dyv[k] * xhat;
        if (db_partial) db_acc[k * packs + p] += dyv[k];
        dxv[k] += r * (dyv[k] * wv[k] - g_mean - xhat * gx_mean);
      }
      store<V>(dx + p * V, dxv);
    }
  }

  __syncthreads();
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const int slot = (j % V) * packs + j / V;
    dw_partial[static_cast<long>(blockIdx.x) * c + j] = dw_acc[slot];
    if (db_partial) db_partial[static_cast<long>(blockIdx.x) * c + j] = db_acc[slot];
  }
}

template <class T, int V, bool kCentered>
void launch_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int n, int c,
                    float eps) {
  norm_forward_kernel<T, V, kCentered>
      <<<n, detail::row_block(c / V), 0, stream()>>>(out, mean, rstd, inp, weight, bias, c, eps);
  check_launch(kCentered ? "layernorm_forward" : "rmsnorm_forward");
}

// As many blocks as fit on the device at once (each loops over rows), capped at one per row. The
// shared accumulators need c (or 2c) floats per block: c up to ~20k (layernorm with bias) or ~40k
// (rmsnorm) on A100, more on H100; longer rows are refused with an error rather than run slowly.
template <class T, int V, bool kCentered>
void launch_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
                     const float* mean, const float* rstd, int n, int c) {
  const auto kernel = norm_backward_kernel<T, V, kCentered>;
  const char* name = kCentered ? "layernorm_backward" : "rmsnorm_backward";
  const int threads = detail::row_block(c / V), arrays = dbias ? 2 : 1;
  const size_t smem = static_cast<size_t>(arrays) * c * sizeof(float);
  int device = 0, smem_max = 0;
  check(cudaGetDevice(&device), name);
  check(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), name);
  if (smem > static_cast<size_t>(smem_max))
    throw std::runtime_error(std::string(name) + ": rows of " + std::to_string(c) + " exceed the " +
                             std::to_string(smem_max) + "-byte shared memory of a block");
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), name);
  const int blocks = static_cast<int>(std::min<long>(n, static_cast<long>(std::max(per_sm, 1)) * detail::sm_count()));

  detail::Scratch<float> partial(static_cast<size_t>(arrays) * blocks * c);
  float* db_partial = dbias ? partial.get() + static_cast<long>(blocks) * c : nullptr;
  kernel<<<blocks, threads, smem, stream()>>>(dinp, partial.get(), db_partial, dout, inp, weight, mean, rstd, n, c);
  check_launch(name);
  detail::add_column_partials(dweight, partial.get(), blocks, c);
  if (dbias) detail::add_column_partials(dbias, db_partial, blocks, c);
}

}  // namespace

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int n, int c,
                       float eps) {
  if (n <= 0 || c <= 0) return;
  if (detail::packable<T>({out, inp, weight, bias}, {c}))
    launch_forward<T, kPack<T>, true>(out, mean, rstd, inp, weight, bias, n, c, eps);
  else
    launch_forward<T, 1, true>(out, mean, rstd, inp, weight, bias, n, c, eps);
}

template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int n, int c) {
  if (n <= 0 || c <= 0) return;
  if (detail::packable<T>({dinp, dout, inp, weight}, {c}))
    launch_backward<T, kPack<T>, true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
  else
    launch_backward<T, 1, true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
}

template <class T>
void rmsnorm_forward(T* out, float* rrms, const T* inp, const T* weight, int n, int c, float eps) {
  if (n <= 0 || c <= 0) return;
  if (detail::packable<T>({out, inp, weight}, {c}))
    launch_forward<T, kPack<T>, false>(out, nullptr, rrms, inp, weight, nullptr, n, c, eps);
  else
    launch_forward<T, 1, false>(out, nullptr, rrms, inp, weight, nullptr, n, c, eps);
}

template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight, const float* rrms, int n,
                      int c) {
  if (n <= 0 || c <= 0) return;
  if (detail::packable<T>({dinp, dout, inp, weight}, {c}))
    launch_backward<T, kPack<T>, false>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rrms, n, c);
  else
    launch_backward<T, 1, false>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rrms, n, c);
}

#define PARALLAX_INSTANTIATE(T)                                                                                     \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, float);            \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, const float*, \
                                      int, int);                                                                    \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float);                                \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, int);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
