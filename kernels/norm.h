// layernorm and rmsnorm over the last dimension of an N x C row-major array, with their backward
// passes. The forward saves the per-row statistics (mean and 1/std, or 1/rms) the backward needs.
// The backward's outputs may each be null (a zero-bubble schedule's B asks for dinp alone, its W
// for the parameter gradients alone, each the same arithmetic as in the combined call); `weight`
// is read only for dinp.
#pragma once

namespace parallax::kernels {

constexpr float kNormEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int n, int c, float eps = kNormEps);
// Accumulates into dinp, dweight, dbias.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int n, int c);

void rmsnorm_forward(float* out, float* rrms, const float* inp, const float* weight, int n, int c, float eps = kNormEps);
// Accumulates into dinp and dweight.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rrms, int n, int c);

}  // namespace parallax::kernels
