// CUDA precision kernels: kernels/cast.h over device pointers (16-bit values as bit patterns,
// round-to-nearest-even like the CPU reference), typed casts between fp32 and a storage type, and
// the loss scaler's inf/NaN check without a host round trip per tensor.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

void to_bf16(uint16_t* out, const float* in, long n);
void from_bf16(float* out, const uint16_t* in, long n);
void to_fp16(uint16_t* out, const float* in, long n);
void from_fp16(float* out, const uint16_t* in, long n);
template <class T>
void cast_from_float(T* out, const float* in, long n);
template <class T>
void cast_to_float(float* out, const T* in, long n);

// Sets *flag (device int) to 1 if any element of x is inf or NaN; never clears it, so one flag
// collects a whole step's gradients.
void find_inf_or_nan(int* flag, const float* x, long n);
// The CPU reference's signature: synchronizes and returns the answer.
bool has_inf_or_nan(const float* x, long n);
void unscale(float* x, long n, float scale);

}  // namespace parallax::kernels::cuda
