#include "kernels/cast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace parallax::kernels {

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t bf16(float f) {
  const uint32_t u = bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a (quiet) NaN
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);                  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// IEEE binary16 with round-to-nearest-even, subnormals, overflow to inf.
uint16_t fp16(float f) {
  const uint32_t u = bits(f), sign = (u >> 16) & 0x8000;
  const uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520: inf
  if (abs < 0x38800000) {                                                // subnormal or zero in fp16
    const float scaled = from_bits(abs) * 16777216.0f;                  // x / 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t mant = abs & 0x7fffff;
  uint32_t h = ((abs >> 23) - 112) << 10 | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
  if (exp == 31) return from_bits(sign | 0x7f800000 | (mant << 13));
  return from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace

void to_bf16(uint16_t* out, const float* in, long n) {
  for (long i = 0; i < n; ++i) out[i] = bf16(in[i]);
}
void from_bf16(float* out, const uint16_t* in, long n) {
  for (long i = 0; i < n; ++i) out[i] = from_bits(static_cast<uint32_t>(in[i]) << 16);
}
void to_fp16(uint16_t* out, const float* in, long n) {
  for (long i = 0; i < n; ++i) out[i] = fp16(in[i]);
}
void from_fp16(float* out, const uint16_t* in, long n) {
  for (long i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}

bool has_inf_or_nan(const float* x, long n) {
  for (long i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

void unscale(float* x, long n, float scale) {
  const float inv = 1.0f / scale;
  for (long i = 0; i < n; ++i) x[i] *= inv;
}

float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

void fp8_round(float* out, const float* in, long n, float scale, Fp8Format f) {
  const int mantissa = f == Fp8Format::kE4M3 ? 3 : 2, min_exponent = f == Fp8Format::kE4M3 ? -6 : -14;
  const double max = fp8_max(f);
  for (long i = 0; i < n; ++i) {
    const double v = static_cast<double>(in[i]) * scale;
    if (v == 0 || !std::isfinite(v)) {
      out[i] = in[i];
      continue;
    }
    // The spacing of FP8 values around v: 2^(e - mantissa bits), fixed below the normal range.
    const int e = std::max(static_cast<int>(std::floor(std::log2(std::fabs(v)))), min_exponent);
    const double quantum = std::ldexp(1.0, e - mantissa);
    const double q = std::clamp(std::nearbyint(v / quantum) * quantum, -max, max);  // ties to even
    out[i] = static_cast<float>(q / scale);
  }
}

}  // namespace parallax::kernels

