// Precision kernels for mixed-precision training: fp32 <-> bf16 / fp16 conversion with
// round-to-nearest-even, the inf/NaN check of dynamic loss scaling, and unscaling. 16-bit values
// are stored as their bit patterns (uint16_t), as on GPUs.
#pragma once

#include <cstdint>

namespace parallax::kernels {

void to_bf16(uint16_t* out, const float* in, long n);
void from_bf16(float* out, const uint16_t* in, long n);
void to_fp16(uint16_t* out, const float* in, long n);
void from_fp16(float* out, const uint16_t* in, long n);

// FP8 as Transformer Engine casts a GEMM operand, emulated in fp32: x * scale rounded to the
// nearest FP8 value (ties to even; subnormals; saturating at the largest finite value), then
// divided by the scale again. E4M3 (4 exponent bits, bias 7, 3 mantissa bits, max 448) for
// forward tensors, E5M2 (bias 15, 2 mantissa bits, max 57,344) for gradients.
enum class Fp8Format { kE4M3, kE5M2 };
float fp8_max(Fp8Format f);
void fp8_round(float* out, const float* in, long n, float scale, Fp8Format f);

// True if any element is inf or NaN (an overflowed loss-scaled gradient).
bool has_inf_or_nan(const float* x, long n);
// x *= 1 / scale.
void unscale(float* x, long n, float scale);

}  // namespace parallax::kernels
