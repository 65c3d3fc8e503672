#include "kernels/activation.h"

#include <cmath>

namespace parallax::kernels {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void gelu_forward(float* out, const float* inp, long n) {
  for (long i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long n) {
  for (long i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float t = std::tanh(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

void relu2_forward(float* out, const float* inp, long n) {
  for (long i = 0; i < n; ++i) out[i] = inp[i] > 0 ? inp[i] * inp[i] : 0.0f;
}

// d/dx max(x, 0)^2 = 2 max(x, 0).
void relu2_backward(float* dinp, const float* inp, const float* dout, long n) {
  for (long i = 0; i < n; ++i) dinp[i] += inp[i] > 0 ? 2.0f * inp[i] * dout[i] : 0.0f;
}

void swiglu_forward(float* out, const float* inp, int n, int f) {
  for (int i = 0; i < n; ++i) {
    const float* gate = inp + static_cast<long>(i) * 2 * f;
    const float* up = gate + f;
    for (int j = 0; j < f; ++j) out[static_cast<long>(i) * f + j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int n, int f) {
  for (int i = 0; i < n; ++i) {
    const float* gate = inp + static_cast<long>(i) * 2 * f;
    const float* up = gate + f;
    float* dgate = dinp + static_cast<long>(i) * 2 * f;
    float* dup = dgate + f;
    for (int j = 0; j < f; ++j) {
      const float s = sigmoid(gate[j]), dy = dout[static_cast<long>(i) * f + j];
      dup[j] += dy * gate[j] * s;
      dgate[j] += dy * up[j] * s * (1.0f + gate[j] * (1.0f - s));  // d/dg of g sigmoid(g)
    }
  }
}

}  // namespace parallax::kernels
