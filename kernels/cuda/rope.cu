// CUDA rotary position embedding, in place on [B, T, H, D] (kernels/cuda/rope.h).
//
// One thread per (sequence, position, frequency) computes the rotation once and applies it to
// that pair in every head; consecutive threads take consecutive frequencies, so each head's halves
// are read and written as contiguous runs. The angle t * base^(-2i/D) reaches thousands of radians
// at long context, where fp32 would lose ~1e-4 of it, so it is formed and reduced to [-pi, pi] in
// fp64 (a few instructions per thread, amortized over the heads) and only then rotated in fp32,
// which matches the CPU reference's fp64 angle to about one fp32 ulp.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr int kHeadsInFlight = 4;

template <class T>
__global__ void rope_kernel(T* x, int b, int t, int h, int d, float base, float sign) {
  const int half = d / 2;
  const long pairs = static_cast<long>(b) * t * half;
  for (long p = detail::thread_index(); p < pairs; p += detail::grid_threads()) {
    const int i = static_cast<int>(p % half);
    const long bt = p / half;  // sequence * t + position
    const double angle = static_cast<double>(bt % t) * pow(static_cast<double>(base), -2.0 * i / d);
    const float reduced = static_cast<float>(angle - rint(angle / kTwoPi) * kTwoPi);
    float s, c;
    sincosf(reduced, &s, &c);
    s *= sign;
    T* v = x + bt * h * d + i;
    // Loads of several heads are issued before their stores: the compiler cannot prove the
    // in-place stores miss the next head's loads, and one pair in flight per thread is too few
    // bytes to cover DRAM latency.
    for (int head0 = 0; head0 < h; head0 += kHeadsInFlight) {
      float a[kHeadsInFlight], z[kHeadsInFlight];
#pragma unroll
      for (int k = 0; k < kHeadsInFlight; ++k)
        if (head0 + k < h) {
          a[k] = detail::to_f32(v[static_cast<long>(head0 + k) * d]);
          z[k] = detail::to_f32(v[static_cast<long>(head0 + k) * d + half]);
        }
#pragma unroll
      for (int k = 0; k < kHeadsInFlight; ++k)
        if (head0 + k < h) {
          v[static_cast<long>(head0 + k) * d] = detail::from_f32<T>(a[k] * c - z[k] * s);
          v[static_cast<long>(head0 + k) * d + half] = detail::from_f32<T>(z[k] * c + a[k] * s);
        }
    }
  }
}

template <class T>
void rotate(T* x, int b, int t, int h, int d, float base, float sign) {
  const long pairs = static_cast<long>(b) * t * (d / 2);
  if (pairs <= 0 || h <= 0) return;
  rope_kernel<T><<<detail::grid_for(pairs), detail::kBlock, 0, stream()>>>(x, b, t, h, d, base, sign);
  check_launch(sign > 0 ? "rope_forward" : "rope_backward");
}

}  // namespace

template <class T>
void rope_forward(T* x, int b, int t, int h, int d, float base) {
  rotate(x, b, t, h, d, base, 1.0f);
}

// The rotation is orthogonal, so its transpose (the rotation by -angle) maps the gradient back.
template <class T>
void rope_backward(T* dx, int b, int t, int h, int d, float base) {
  rotate(dx, b, t, h, d, base, -1.0f);
}

#define PARALLAX_INSTANTIATE(T)                                 \
  template void rope_forward<T>(T*, int, int, int, int, float); \
  template void rope_backward<T>(T*, int, int, int, int, float);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
