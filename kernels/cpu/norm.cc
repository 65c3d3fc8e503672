#include "kernels/norm.h"

#include <cmath>

namespace parallax::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int n, int c, float eps) {
  for (int i = 0; i < n; ++i) {
    const float* x = inp + static_cast<long>(i) * c;
    double m = 0, v = 0;
    for (int j = 0; j < c; ++j) m += x[j];
    m /= c;
    for (int j = 0; j < c; ++j) v += (x[j] - m) * (x[j] - m);
    v /= c;
    const float s = 1.0f / std::sqrt(static_cast<float>(v) + eps);
    float* y = out + static_cast<long>(i) * c;
    for (int j = 0; j < c; ++j) y[j] = (x[j] - static_cast<float>(m)) * s * weight[j] + (bias ? bias[j] : 0.0f);
    mean[i] = static_cast<float>(m);
    rstd[i] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int n, int c) {
  for (int i = 0; i < n; ++i) {
    const float* x = inp + static_cast<long>(i) * c;
    const float* dy = dout + static_cast<long>(i) * c;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight.
    double g_mean = 0, gx_mean = 0;
    for (int j = 0; dinp && j < c; ++j) {
      const float xhat = (x[j] - mean[i]) * rstd[i];
      g_mean += dy[j] * weight[j];
      gx_mean += dy[j] * weight[j] * xhat;
    }
    g_mean /= c;
    gx_mean /= c;
    for (int j = 0; j < c; ++j) {
      const float xhat = (x[j] - mean[i]) * rstd[i];
      if (dbias) dbias[j] += dy[j];
      if (dweight) dweight[j] += dy[j] * xhat;
      if (dinp)
        dinp[static_cast<long>(i) * c + j] +=
            rstd[i] * (dy[j] * weight[j] - static_cast<float>(g_mean) - xhat * static_cast<float>(gx_mean));
    }
  }
}

void rmsnorm_forward(float* out, float* rrms, const float* inp, const float* weight, int n, int c, float eps) {
  for (int i = 0; i < n; ++i) {
    const float* x = inp + static_cast<long>(i) * c;
    double ss = 0;
    for (int j = 0; j < c; ++j) ss += static_cast<double>(x[j]) * x[j];
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / c) + eps);
    float* y = out + static_cast<long>(i) * c;
    for (int j = 0; j < c; ++j) y[j] = x[j] * r * weight[j];
    rrms[i] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rrms, int n, int c) {
  for (int i = 0; i < n; ++i) {
    const float* x = inp + static_cast<long>(i) * c;
    const float* dy = dout + static_cast<long>(i) * c;
    // y = x r w with r = (mean(x^2) + eps)^-1/2: dx = r (g - xhat mean(g xhat)), g = dy w, xhat = x r.
    double gx_mean = 0;
    for (int j = 0; dinp && j < c; ++j) gx_mean += dy[j] * weight[j] * x[j] * rrms[i];
    gx_mean /= c;
    for (int j = 0; j < c; ++j) {
      const float xhat = x[j] * rrms[i];
      if (dweight) dweight[j] += dy[j] * xhat;
      if (dinp)
        dinp[static_cast<long>(i) * c + j] += rrms[i] * (dy[j] * weight[j] - xhat * static_cast<float>(gx_mean));
    }
  }
}

}  // namespace parallax::kernels
