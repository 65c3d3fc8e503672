// Helpers of the CUDA kernel tests (tests/kernels/cuda_*_test.cc): device arrays, conversions
// between fp32 and the storage types through the CPU reference casts, and the precision-derived
// tolerance every GPU-vs-CPU comparison uses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cast.h"         // CPU to_bf16 / to_fp16 / from_bf16 / from_fp16
#include "kernels/cuda/common.h"  // cuda::check, cuda::stream, bf16, fp16

namespace parallax::kernels::cuda_test {

using Vec = std::vector<float>;
using cuda::bf16;
using cuda::fp16;

// --- device buffers and storage conversions --------------------------------------------------------

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    cuda::check(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    cuda::check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  // Waits for the kernels on cuda::stream() before copying.
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda::check(cudaStreamSynchronize(cuda::stream()), "kernels");
    cuda::check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

// fp32 -> storage type with the CPU reference's round-to-nearest-even (kernels/cast.h).
template <class T>
std::vector<T> to_storage(const Vec& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<uint16_t> bits(x.size());
    if constexpr (std::is_same_v<T, bf16>)
      kernels::to_bf16(bits.data(), x.data(), static_cast<long>(x.size()));
    else
      kernels::to_fp16(bits.data(), x.data(), static_cast<long>(x.size()));
    std::vector<T> out(x.size());
    std::memcpy(static_cast<void*>(out.data()), bits.data(), bits.size() * sizeof(uint16_t));
    return out;
  }
}

template <class T>
Vec to_f32(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<uint16_t> bits(x.size());
    std::memcpy(bits.data(), static_cast<const void*>(x.data()), bits.size() * sizeof(uint16_t));
    Vec out(x.size());
    if constexpr (std::is_same_v<T, bf16>)
      kernels::from_bf16(out.data(), bits.data(), static_cast<long>(x.size()));
    else
      kernels::from_fp16(out.data(), bits.data(), static_cast<long>(x.size()));
    return out;
  }
}

// Values representable in T, so the CPU and the GPU see the same inputs.
template <class T>
Vec rounded(const Vec& x) {
  return to_f32(to_storage<T>(x));
}

template <class T>
Vec download_f32(const DeviceArray<T>& d) {
  return to_f32(d.download());
}

template <class T>
Vec random_normal(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return rounded<T>(v);
}

// --- tolerances --------------------------------------------------------------------------------------

template <class T>
constexpr double kUnitRoundoff = std::is_same_v<T, float>  ? 0x1p-24
                                 : std::is_same_v<T, bf16> ? 0x1p-8
                                                           : 0x1p-11;

// rtol for an output stored as T whose fp32 computation takes `terms` rounded operations (the
// length of a reduction, or a handful for a pointwise formula). Two effects differ between GPU
// and CPU: (1) the fp32 arithmetic itself, done in another order (tree reductions, FMA
// contraction, expf/tanhf/sincosf within 2 ulp): rounding errors of 2^-24 each, which over
// `terms` operations add up like a random walk to about 2^-24 sqrt(terms); (2) the GPU's final
// rounding of the output to T, at most T's unit roundoff u (2^-8 bf16, 2^-11 fp16; for fp32 this
// is one more 2^-24). The factor 4 covers the random walk's tail and a value sitting on a
// rounding boundary. fp32 outputs from T inputs (statistics, parameter gradients) use T = float.
template <class T>
double rtol(double terms) {
  return 4.0 * (kUnitRoundoff<T> + 0x1p-24 * std::sqrt(terms));
}

inline double max_abs(const Vec& x) {
  double m = 0;
  for (float v : x) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

inline double mean_abs(const Vec& x) {
  double s = 0;
  for (float v : x) s += std::abs(v);
  return x.empty() ? 0 : s / x.size();
}

// |gpu - ref| <= atol + rtol |ref| elementwise, atol = rtol * scale. Rounding errors are relative
// to the terms that were combined, not to a result that is small because they cancelled, so the
// floor uses the size of the terms: by default the largest |ref|, or the caller's estimate.
inline void expect_close(const char* what, const Vec& gpu, const Vec& ref, double rtol, double scale = -1) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  const double atol = rtol * (scale < 0 ? max_abs(ref) : scale);
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(gpu[i]) - ref[i]);
    if (err <= atol + rtol * std::abs(ref[i])) continue;  // false for NaN too
    if (++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " ref " << ref[i] << " err " << err << " > "
                    << atol + rtol * std::abs(ref[i]);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " out of tolerance";
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Readable names of the typed tests' instantiations (".../fp32", ".../bf16", ".../fp16").
struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, bf16> ? "bf16" : "fp16";
  }
};
using StorageTypes = ::testing::Types<float, bf16, fp16>;

}  // namespace parallax::kernels::cuda_test
