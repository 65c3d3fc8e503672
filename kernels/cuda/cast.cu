// CUDA precision kernels (kernels/cuda/cast.h): fp32 <-> bf16 / fp16 with the CPU reference's exact
// bit patterns, typed casts through the same conversions, and the loss scaler's inf/NaN check.
//
// The conversions are integer transcriptions of kernels/cpu/cast.cc rather than the hardware cvt
// instructions: those agree on every finite value but return a canonical NaN, while the reference
// keeps the NaN's sign and (for bf16) its payload; transcribing keeps CPU and GPU runs bit-identical.
#include "kernels/cuda/cast.h"

#include <type_traits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/elementwise.h"

namespace parallax::kernels::cuda {

namespace {

__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // stays a quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1);                                  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// IEEE binary16, round to nearest even, subnormals, overflow to inf. The subnormal branch scales by
// 2^24 (exact) and rounds with rintf (ties to even); its inputs are normal fp32 numbers from 2^-126
// up, so flush-to-zero builds change only fp32 subnormal inputs, which round to zero anyway.
__device__ __forceinline__ uint16_t fp16_bits(float f) {
  const uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(__uint_as_float(abs) * 16777216.0f)));
  const uint32_t mant = abs & 0x7fffffu, rest = mant & 0x1fffu;
  uint32_t h = ((abs >> 23) - 112) << 10 | (mant >> 13);
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ __forceinline__ float fp16_value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24, exact
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}

struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return bf16_bits(x); }
};
struct ToFp16 {
  __device__ uint16_t operator()(float x) const { return fp16_bits(x); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t x) const { return bf16_value(x); }
};
struct FromFp16 {
  __device__ float operator()(uint16_t x) const { return fp16_value(x); }
};

// Four elements per thread: one 16-byte fp32 access and one 8-byte 16-bit access.
constexpr int kCastPack = 4;

template <int V, class Out, class In, class Convert>
__global__ void convert_kernel(Out* __restrict__ out, const In* __restrict__ in, long n, Convert convert) {
  for (long i = detail::thread_index() * V; i < n; i += detail::grid_threads() * V) {
    const auto a = *reinterpret_cast<const detail::Pack<In, V>*>(in + i);
    detail::Pack<Out, V> b;
#pragma unroll
    for (int k = 0; k < V; ++k) b.v[k] = convert(a.v[k]);
    *reinterpret_cast<detail::Pack<Out, V>*>(out + i) = b;
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <class Convert, class Out, class In>
void convert(Out* out, const In* in, long n, const char* name) {
  if (n <= 0) return;
  constexpr int V = kCastPack;
  if (n % V == 0 && aligned(out, V * sizeof(Out)) && aligned(in, V * sizeof(In)))
    convert_kernel<V, Out, In, Convert>
        <<<detail::grid_for(n / V), detail::kBlock, 0, stream()>>>(out, in, n, Convert{});
  else
    convert_kernel<1, Out, In, Convert><<<detail::grid_for(n), detail::kBlock, 0, stream()>>>(out, in, n, Convert{});
  check_launch(name);
}

uint16_t* bits(bf16* p) { return reinterpret_cast<uint16_t*>(p); }
uint16_t* bits(fp16* p) { return reinterpret_cast<uint16_t*>(p); }
const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
const uint16_t* bits(const fp16* p) { return reinterpret_cast<const uint16_t*>(p); }

// One flag store per warp that saw a non-finite value; the store is idempotent, so racing warps
// need no atomics, and the flag is never cleared here.
template <int V>
__global__ void find_inf_or_nan_kernel(int* flag, const float* __restrict__ x, long n) {
  bool found = false;
  for (long i = detail::thread_index() * V; i < n; i += detail::grid_threads() * V) {
    float xv[V];
    detail::load<V>(xv, x + i);
#pragma unroll
    for (int k = 0; k < V; ++k) found |= (__float_as_uint(xv[k]) & 0x7f800000u) == 0x7f800000u;
  }
  if (__any_sync(0xffffffffu, found) && threadIdx.x % 32 == 0) *flag = 1;
}

}  // namespace

void to_bf16(uint16_t* out, const float* in, long n) { convert<ToBf16>(out, in, n, "to_bf16"); }
void from_bf16(float* out, const uint16_t* in, long n) { convert<FromBf16>(out, in, n, "from_bf16"); }
void to_fp16(uint16_t* out, const float* in, long n) { convert<ToFp16>(out, in, n, "to_fp16"); }
void from_fp16(float* out, const uint16_t* in, long n) { convert<FromFp16>(out, in, n, "from_fp16"); }

template <class T>
void cast_from_float(T* out, const float* in, long n) {
  if constexpr (std::is_same_v<T, float>) {
    if (n > 0 && out != in)
      check(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream()), "cast_from_float");
  } else if constexpr (std::is_same_v<T, bf16>) {
    to_bf16(bits(out), in, n);
  } else {
    to_fp16(bits(out), in, n);
  }
}

template <class T>
void cast_to_float(float* out, const T* in, long n) {
  if constexpr (std::is_same_v<T, float>) {
    cast_from_float<float>(out, in, n);
  } else if constexpr (std::is_same_v<T, bf16>) {
    from_bf16(out, bits(in), n);
  } else {
    from_fp16(out, bits(in), n);
  }
}

template void cast_from_float<float>(float*, const float*, long);
template void cast_from_float<bf16>(bf16*, const float*, long);
template void cast_from_float<fp16>(fp16*, const float*, long);
template void cast_to_float<float>(float*, const float*, long);
template void cast_to_float<bf16>(float*, const bf16*, long);
template void cast_to_float<fp16>(float*, const fp16*, long);

void find_inf_or_nan(int* flag, const float* x, long n) {
  if (n <= 0) return;
  constexpr int V = detail::kPack<float>;
  if (detail::packable<float>({x}, {n}))
    find_inf_or_nan_kernel<V><<<detail::grid_for(n / V), detail::kBlock, 0, stream()>>>(flag, x, n);
  else
    find_inf_or_nan_kernel<1><<<detail::grid_for(n), detail::kBlock, 0, stream()>>>(flag, x, n);
  check_launch("find_inf_or_nan");
}

bool has_inf_or_nan(const float* x, long n) {
  detail::Scratch<int> flag(1);
  check(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream()), "has_inf_or_nan: clear flag");
  find_inf_or_nan(flag.get(), x, n);
  int found = 0;
  check(cudaMemcpyAsync(&found, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, stream()),
        "has_inf_or_nan: read flag");
  check(cudaStreamSynchronize(stream()), "has_inf_or_nan");
  return found != 0;
}

void unscale(float* x, long n, float s) { scale(x, n, 1.0f / s); }  // x *= 1 / s, the CPU's two roundings

}  // namespace parallax::kernels::cuda
