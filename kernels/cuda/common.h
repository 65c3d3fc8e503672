// What every CUDA kernel of kernels/cuda shares: the storage types (fp32, bf16, fp16; arithmetic
// is always fp32 inside a kernel), the stream kernels are launched on, and error checks. Kernels
// keep the signatures of their CPU references in kernels/*.h, with device pointers, so a test can
// run both on the same data; the stream is per host thread (set_stream) rather than an argument
// for that reason. Launches are asynchronous: errors surface at the next synchronizing call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace parallax::kernels::cuda {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// The stream this thread's kernels and GEMMs are launched on (default: the legacy stream 0).
void set_stream(cudaStream_t stream);
cudaStream_t stream();

// True when a CUDA device can be used (tests skip otherwise); never aborts.
bool device_available();

// The current device's name ("unknown" when there is none).
std::string device_name();

// Throws std::runtime_error naming `what` and the CUDA error when `err` is not cudaSuccess.
void check(cudaError_t err, const char* what);
// Checks the last launch (cudaGetLastError) and names it.
void check_launch(const char* kernel);

}  // namespace parallax::kernels::cuda
