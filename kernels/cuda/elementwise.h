// CUDA glue of the transformer that has no CPU kernel of its own (the CPU runtime writes these as
// loops): residual adds, biases and their gradients, column slices of row-major arrays, and a
// deterministic fill for synthetic inputs (timing never runs on all-zero data).
#pragma once

#include <cstdint>

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

// out = a + b (out may alias a or b).
template <class T>
void add(T* out, const T* a, const T* b, long n);
// x[r, :] += bias for each of `rows` rows of `cols`.
template <class T>
void add_bias(T* x, const T* bias, int rows, int cols);
// dbias[j] += sum over rows of dout[r, j] (fp32).
template <class T>
void bias_backward(float* dbias, const T* dout, int rows, int cols);
// dst (rows x width) = columns [col, col + width) of src (rows x stride); set_columns writes back.
template <class T>
void get_columns(T* dst, const T* src, int rows, int stride, int col, int width);
template <class T>
void set_columns(T* dst, const T* src, int rows, int stride, int col, int width);
// x[i] = scale * u(seed, i), u uniform in [-1, 1), a counter-based hash (the same on every run).
template <class T>
void fill_uniform(T* x, long n, uint64_t seed, float scale);
// x[i] = scale * x[i], fp32.
void scale(float* x, long n, float s);

}  // namespace parallax::kernels::cuda
