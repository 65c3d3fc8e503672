#include "kernels/cuda/reduce.h"

namespace parallax::kernels::cuda {

namespace {

constexpr int kBlocks = 256, kThreads = 256;

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0;
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;  // valid in thread 0
}

template <bool kSquare>
__global__ void partial_sums(double* partial, const float* x, long n) {
  double s = 0;
  for (long i = blockIdx.x * static_cast<long>(kThreads) + threadIdx.x; i < n; i += static_cast<long>(kBlocks) * kThreads) {
    const double v = x[i];
    s += kSquare ? v * v : v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <class Out, bool kAccumulate>
__global__ void final_sum(Out* out, const double* partial) {
  const double s = block_sum(partial[threadIdx.x]);  // kThreads == kBlocks
  if (threadIdx.x == 0) *out = static_cast<Out>(kAccumulate ? *out + s : s);
}

template <bool kSquare, class Out, bool kAccumulate>
void reduce(Out* out, const float* x, long n) {
  static_assert(kBlocks == kThreads, "final_sum reads one partial per thread");
  double* partial = nullptr;
  check(cudaMallocAsync(&partial, kBlocks * sizeof(double), stream()), "cudaMallocAsync(reduce)");
  partial_sums<kSquare><<<kBlocks, kThreads, 0, stream()>>>(partial, x, n);
  check_launch("partial_sums");
  final_sum<Out, kAccumulate><<<1, kThreads, 0, stream()>>>(out, partial);
  check_launch("final_sum");
  check(cudaFreeAsync(partial, stream()), "cudaFreeAsync(reduce)");
}

}  // namespace

void sum_squares(double* out, const float* x, long n) { reduce<true, double, false>(out, x, n); }
void sum_into(float* acc, const float* x, long n) { reduce<false, float, true>(acc, x, n); }

}  // namespace parallax::kernels::cuda
