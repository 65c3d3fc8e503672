// Device-side helpers shared by the .cu files of kernels/cuda (not part of the public API): fp32
// views of the storage types, 16-byte packed loads and stores, warp and block reductions, launch
// sizes, and a stream-ordered scratch buffer.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda::detail {

// --- fp32 views of the storage types (arithmetic is always fp32) ---------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(fp16 x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ fp16 from_f32<fp16>(float x) {
  return __float2half_rn(x);
}

// --- packed memory access --------------------------------------------------------------------------

// Elements per 16-byte access: one LDG.128 / STG.128 per thread moves the most bytes per instruction.
template <class T>
inline constexpr int kPack = 16 / sizeof(T);

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Loads V consecutive elements as fp32; p must be aligned to V elements.
template <int V, class T>
__device__ __forceinline__ void load(float (&out)[V], const T* p) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int k = 0; k < V; ++k) out[k] = to_f32(pack.v[k]);
}

template <int V, class T>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int k = 0; k < V; ++k) pack.v[k] = from_f32<T>(in[k]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// True when every pointer is 16-byte aligned and each of `counts` (lengths, row strides, column
// offsets) is a whole number of packs, so a kernel may use packs of kPack<T> without a tail.
template <class T>
bool packable(std::initializer_list<const void*> ptrs, std::initializer_list<long> counts) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (long n : counts)
    if (n % kPack<T> != 0) return false;
  return true;
}

// --- reductions ------------------------------------------------------------------------------------

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  static constexpr float kIdentity = -__builtin_huge_valf();
};

// Butterfly reduction: every lane ends with the result, in the same order on every run.
template <class Op>
__device__ __forceinline__ float warp_reduce(float x, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Reduction over a block whose size is a multiple of 32 (at most 1024); every thread gets the
// result. Safe to call repeatedly in one kernel: the first barrier keeps a previous call's readers
// from seeing this call's partials.
template <class Op>
__device__ float block_reduce(float x, Op op) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = warp_reduce(x, op);
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : Op::kIdentity;
  return warp_reduce(x, op);
}

// --- launch sizes ----------------------------------------------------------------------------------

constexpr int kBlock = 256;  // elementwise kernels: 8 blocks fill an SM's 2048 threads

inline int sm_count() {
  int device = 0, count = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return count;
}

// Blocks for a grid-stride loop over `items` work items of kBlock threads: enough for one full
// wave of the device and no more, so each thread loops instead of paying for block launches.
inline int grid_for(long items) {
  const long wanted = (items + kBlock - 1) / kBlock;
  const long wave = static_cast<long>(sm_count()) * (2048 / kBlock);
  return static_cast<int>(wanted < wave ? wanted : wave);
}

// Threads for a kernel with one block per row of `packs` packs: one pack per thread up to 512
// threads (a multiple of 32, so block_reduce applies); longer rows loop.
inline int row_block(long packs) {
  const long warps = (packs + 31) / 32;
  return static_cast<int>(32 * (warps < 1 ? 1 : warps > 16 ? 16 : warps));
}

__device__ __forceinline__ long thread_index() { return blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ long grid_threads() { return static_cast<long>(gridDim.x) * blockDim.x; }

// --- scratch ---------------------------------------------------------------------------------------

// A temporary device buffer ordered on stream(), freed (stream-ordered) when it goes out of scope.
// cudaMallocAsync / cudaFreeAsync draw from the device's memory pool: no synchronization, and
// memory freed on the stream is reused by its next allocation without the driver. (The pool
// returns unused memory at synchronizations unless cudaMemPoolAttrReleaseThreshold is raised;
// that is the application's choice, not a kernel's.)
template <class T>
class Scratch {
 public:
  explicit Scratch(size_t count) : stream_(stream()) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), count * sizeof(T), stream_), "cudaMallocAsync");
  }
  ~Scratch() { cudaFreeAsync(ptr_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  T* ptr_ = nullptr;
};

// out[j] += sum over chunks of partial[chunk * cols + j], in an order fixed by the shapes alone
// (deterministic): the second half of every fp32 column reduction here (bias and norm parameter
// gradients). Defined in elementwise.cu.
void add_column_partials(float* out, const float* partial, int chunks, int cols);

}  // namespace parallax::kernels::cuda::detail
