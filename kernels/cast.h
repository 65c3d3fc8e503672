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

// True if any element is inf or NaN (an overflowed loss-scaled gradient).
bool has_inf_or_nan(const float* x, long n);
// x *= 1 / scale.
void unscale(float* x, long n, float scale);

}  // namespace parallax::kernels
