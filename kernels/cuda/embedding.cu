// CUDA vocab-parallel token and position embedding, forward and backward (kernels/cuda/embedding.h).
//
// Backward determinism: the position gradient is a fixed-order sum per (position, column) and is
// bit-identical to the CPU reference. The token gradient uses float atomicAdd (a fire-and-forget
// RED, since tokens repeat in any order within a batch): its value is exact up to the order of the
// fp32 additions into a repeated token's row, which varies from run to run.
#include "kernels/cuda/embedding.h"

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

using detail::grid_for;
using detail::grid_threads;
using detail::kPack;
using detail::load;
using detail::store;
using detail::thread_index;

// Element i = (token, column) of out [N, C]; packs stay within a row since c is whole packs for V > 1.
// wpe is null when positions are not added on this rank.
template <class T, int V>
__global__ void embedding_forward_kernel(T* __restrict__ out, const int* __restrict__ tokens, const T* __restrict__ wte,
                                         const T* __restrict__ wpe, long total, int t, int c, int vocab_start,
                                         int vocab_local) {
  for (long i = thread_index() * V; i < total; i += grid_threads() * V) {
    const long token = i / c;
    const int j = static_cast<int>(i % c), row = tokens[token] - vocab_start;
    float y[V] = {};
    if (row >= 0 && row < vocab_local) load<V>(y, wte + static_cast<long>(row) * c + j);
    if (wpe) {
      float p[V];
      load<V>(p, wpe + (token % t) * c + j);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] += p[k];
    }
    store<V>(out + i, y);
  }
}

template <class T, int V>
__global__ void token_gradient_kernel(float* dwte, const T* __restrict__ dout, const int* __restrict__ tokens,
                                      long total, int c, int vocab_start, int vocab_local) {
  for (long i = thread_index() * V; i < total; i += grid_threads() * V) {
    const int row = tokens[i / c] - vocab_start;
    if (row < 0 || row >= vocab_local) continue;
    float dy[V];
    load<V>(dy, dout + i);
    float* dst = dwte + static_cast<long>(row) * c + i % c;
#pragma unroll
    for (int k = 0; k < V; ++k) atomicAdd(dst + k, dy[k]);
  }
}

// Position p collects tokens p, p + t, p + 2t, ... in that order, one thread per (p, column):
// the CPU reference's order of additions.
template <class T>
__global__ void position_gradient_kernel(float* __restrict__ dwpe, const T* __restrict__ dout, int n, int t, int c) {
  const long positions = n < t ? n : t, total = positions * c;
  for (long e = thread_index(); e < total; e += grid_threads()) {
    const long p = e / c, j = e % c;
    float acc = dwpe[e];
    for (long token = p; token < n; token += t) acc += detail::to_f32(dout[token * c + j]);
    dwpe[e] = acc;
  }
}

}  // namespace

template <class T>
void embedding_forward(T* out, const int* tokens, const T* wte, const T* wpe, int n, int t, int c, int vocab_start,
                       int vocab_local, bool add_positions) {
  const long total = static_cast<long>(n) * c;
  if (total <= 0) return;
  const T* positions = add_positions ? wpe : nullptr;
  if (detail::packable<T>({out, wte, positions}, {c}))
    embedding_forward_kernel<T, kPack<T>><<<grid_for(total / kPack<T>), detail::kBlock, 0, stream()>>>(
        out, tokens, wte, positions, total, t, c, vocab_start, vocab_local);
  else
    embedding_forward_kernel<T, 1><<<grid_for(total), detail::kBlock, 0, stream()>>>(out, tokens, wte, positions, total,
                                                                                     t, c, vocab_start, vocab_local);
  check_launch("embedding_forward");
}

template <class T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int* tokens, int n, int t, int c,
                        int vocab_start, int vocab_local) {
  const long total = static_cast<long>(n) * c;
  if (total <= 0) return;
  if (detail::packable<T>({dout}, {c}))
    token_gradient_kernel<T, kPack<T>><<<grid_for(total / kPack<T>), detail::kBlock, 0, stream()>>>(
        dwte, dout, tokens, total, c, vocab_start, vocab_local);
  else
    token_gradient_kernel<T, 1>
        <<<grid_for(total), detail::kBlock, 0, stream()>>>(dwte, dout, tokens, total, c, vocab_start, vocab_local);
  check_launch("embedding_backward (tokens)");
  if (!dwpe) return;
  position_gradient_kernel<T>
      <<<grid_for(static_cast<long>(n < t ? n : t) * c), detail::kBlock, 0, stream()>>>(dwpe, dout, n, t, c);
  check_launch("embedding_backward (positions)");
}

#define PARALLAX_INSTANTIATE(T)                                                                          \
  template void embedding_forward<T>(T*, const int*, const T*, const T*, int, int, int, int, int, bool); \
  template void embedding_backward<T>(float*, float*, const T*, const int*, int, int, int, int, int);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
