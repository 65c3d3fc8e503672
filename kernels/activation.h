// Activation functions of the MLP: GELU (the tanh approximation GPT-2 uses, "gelu_new"), squared
// ReLU (max(x, 0)^2, Nemotron's "relu2") and SwiGLU (silu(gate) * up, Llama's), with backward
// passes that accumulate into the input gradient.
#pragma once

namespace parallax::kernels {

void gelu_forward(float* out, const float* inp, long n);
void gelu_backward(float* dinp, const float* inp, const float* dout, long n);

void relu2_forward(float* out, const float* inp, long n);
void relu2_backward(float* dinp, const float* inp, const float* dout, long n);

// inp is N x 2F with the gate in columns [0, F) and up in [F, 2F) of each row; out is N x F.
void swiglu_forward(float* out, const float* inp, int n, int f);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int n, int f);

}  // namespace parallax::kernels
