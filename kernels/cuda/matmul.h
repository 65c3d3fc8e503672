// CUDA linear layer over cuBLASLt: kernels/matmul.h's y = x W^T + b and its backward on device
// pointers. fp32 runs fp32 GEMMs (no TF32: it must match the CPU reference); bf16 and fp16 run
// tensor-core GEMMs with fp32 accumulation, the weight gradient written straight into fp32
// (cuBLASLt's mixed A/B 16-bit, C/D fp32 mode), so micro-batches accumulate gradients in fp32.
#pragma once

#include <cstddef>

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

// out = inp * weight^T (+ bias).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int n, int c, int oc);
// Accumulates into dinp, dweight and dbias, each of which may be null (a zero-bubble schedule's B
// asks for dinp alone, its W for dweight and dbias alone; `weight` is read only for dinp). With
// accumulate_dinp false, dinp is written instead (the GPU trainer's fresh buffers need no zeroing
// pass).
template <class T>
void matmul_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight, int n, int c,
                     int oc, bool accumulate_dinp = true);

// The bytes of the cuBLASLt workspace this process holds from the first GEMM on (outside the
// caching allocator: the trainer adds them to its peak memory).
size_t matmul_workspace_bytes();

}  // namespace parallax::kernels::cuda
