// Rotary position embedding (RoPE) as Llama applies it to q and k: within each head of D values,
// element i and i + D/2 rotate by angle t * base^(-2i/D), t the position. In place on [B, T, H, D].
#pragma once

namespace parallax::kernels {

void rope_forward(float* x, int b, int t, int h, int d, float base);
// The inverse rotation applied to the gradient, in place.
void rope_backward(float* dx, int b, int t, int h, int d, float base);

}  // namespace parallax::kernels
