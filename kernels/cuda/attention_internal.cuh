// Private to kernels/cuda/attention*.cu: the device helpers both attention implementations share
// and the launchers of the fp32 CUDA-core fallback (attention_fallback.cu), which the dispatch in
// attention.cu calls for fp32 storage, head dims other than 64 and 128, or unaligned pointers.
#pragma once

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.h"

namespace parallax::kernels::cuda::attention_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxHeadDim = 256;

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(bf16 x) { return __bfloat162float(x); }
__device__ inline float to_float(fp16 x) { return __half2float(x); }
template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }
template <>
__device__ inline fp16 from_float<fp16>(float x) { return __float2half(x); }
__device__ inline unsigned bits(bf16 x) { return __bfloat16_as_ushort(x); }
__device__ inline unsigned bits(fp16 x) { return __half_as_ushort(x); }
// Two 16-bit values as one word, a at the lower address.
template <class T>
__device__ inline unsigned pack2(float a, float b) {
  return bits(from_float<T>(a)) | bits(from_float<T>(b)) << 16;
}

__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// (b, t = 0, head) of a [B, T, heads, D] tensor; consecutive t are heads * D apart.
template <class T>
__device__ inline T* head_base(T* x, const AttentionShape& s, int batch, int heads, int head) {
  return x + (static_cast<long>(batch) * s.t * heads + head) * s.d;
}

// The block's (tile, head, batch). Ranks are outermost so that every head's and sequence's most
// expensive tile of the causal triangle is scheduled first and the cheap ones fill the tail.
struct TileIndex {
  int tile, head, batch;
};
__device__ inline TileIndex tile_index(int heads, int batch, int tiles, bool heavy_last) {
  const int per_rank = heads * batch;
  const int rank = blockIdx.x / per_rank, rest = blockIdx.x % per_rank;
  return {heavy_last ? tiles - 1 - rank : rank, rest % heads, rest / heads};
}

// Asynchronous global -> shared copies (sm_80+). A source size of 0 zero-fills the destination, which
// is how rows at or past T are padded without a branch around the copy.
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ inline void cp_async4(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's most recent groups are in flight.
template <int pending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}


inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

inline unsigned grid_blocks(int tiles, int heads, int batch) {
  const long blocks = static_cast<long>(tiles) * heads * batch;
  if (blocks > INT_MAX) throw std::invalid_argument("flash_attention: grid too large");
  return static_cast<unsigned>(blocks);
}

// Kernels above 48 KiB of dynamic shared memory must opt in.
template <class Kernel>
void allow_smem(Kernel* kernel, int bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute(flash attention shared memory)");
}

// The fallback's launchers; `delta` is D = rowsum(dO * O), [B, H, T].
template <class T>
void forward_fallback(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, float scale_log2);
template <class T>
void backward_fallback(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                       const float* delta, AttentionShape s, float scale_log2, float scale);

}  // namespace parallax::kernels::cuda::attention_detail
