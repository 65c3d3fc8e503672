#include "kernels/rope.h"

#include <cmath>

namespace parallax::kernels {

namespace {
void rotate(float* x, int b, int t, int h, int d, int r, float base, float sign, const int* pos) {
  const int half = r / 2;
  for (int bi = 0; bi < b; ++bi)
    for (int ti = 0; ti < t; ++ti)
      for (int i = 0; i < half; ++i) {
        const double angle = (pos ? pos[ti] : ti) * std::pow(static_cast<double>(base), -2.0 * i / r);
        const float c = static_cast<float>(std::cos(angle)), s = sign * static_cast<float>(std::sin(angle));
        for (int hi = 0; hi < h; ++hi) {
          float* v = x + ((static_cast<long>(bi) * t + ti) * h + hi) * d;
          const float a = v[i], z = v[i + half];
          v[i] = a * c - z * s;
          v[i + half] = z * c + a * s;
        }
      }
}
}  // namespace

void rope_forward(float* x, int b, int t, int h, int d, int r, float base, const int* pos) {
  rotate(x, b, t, h, d, r, base, 1.0f, pos);
}
void rope_backward(float* dx, int b, int t, int h, int d, int r, float base, const int* pos) {
  rotate(dx, b, t, h, d, r, base, -1.0f, pos);
}

}  // namespace parallax::kernels
