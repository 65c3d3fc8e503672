// Rotary position embedding (RoPE) as Llama applies it to q and k: within the first R of each
// head's D values, element i and i + R/2 rotate by angle t * base^(-2i/R), t the position; the
// other D - R pass through (R = D for Llama, D/2 for Nemotron's partial rotary). In place on
// [B, T, H, D].
#pragma once

namespace parallax::kernels {

// `pos` (optional, t entries): each row's position in its sequence, for a context-parallel rank's
// tokens; null: row i is position i.
void rope_forward(float* x, int b, int t, int h, int d, int r, float base, const int* pos = nullptr);
// The inverse rotation applied to the gradient, in place.
void rope_backward(float* dx, int b, int t, int h, int d, int r, float base, const int* pos = nullptr);

}  // namespace parallax::kernels
