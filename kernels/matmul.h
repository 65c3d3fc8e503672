// matmul: the linear layer y = x W^T + b of the transformer, and its backward, on row-major
// float arrays (x: N x C, W: OC x C as PyTorch stores it, y: N x OC). The CPU reference maps the
// arrays into Eigen; kernels/cuda provides the same signatures over cuBLAS.
#pragma once

namespace parallax::kernels {

// out = inp * weight^T (+ bias). bias may be null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int n, int c, int oc);

// Accumulates (+=) into dinp, dweight and dbias, so micro-batches accumulate gradients in place.
// Any of them may be null: a zero-bubble schedule's B asks for dinp alone and its W for dweight and
// dbias alone, each the same arithmetic as in the combined call. `weight` is read only for dinp,
// `inp` only for dweight.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int n, int c, int oc);

}  // namespace parallax::kernels
