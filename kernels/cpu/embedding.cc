#include "kernels/embedding.h"

#include <algorithm>

namespace parallax::kernels {

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int n, int t, int c,
                       int vocab_start, int vocab_local, bool add_positions) {
  for (int i = 0; i < n; ++i) {
    float* y = out + static_cast<long>(i) * c;
    const int row = tokens[i] - vocab_start;
    if (row >= 0 && row < vocab_local) {
      std::copy(wte + static_cast<long>(row) * c, wte + static_cast<long>(row + 1) * c, y);
    } else {
      std::fill(y, y + c, 0.0f);
    }
    if (wpe && add_positions)
      for (int j = 0; j < c; ++j) y[j] += wpe[static_cast<long>(i % t) * c + j];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int n, int t, int c,
                        int vocab_start, int vocab_local) {
  for (int i = 0; i < n; ++i) {
    const float* dy = dout + static_cast<long>(i) * c;
    const int row = tokens[i] - vocab_start;
    if (row >= 0 && row < vocab_local)
      for (int j = 0; j < c; ++j) dwte[static_cast<long>(row) * c + j] += dy[j];
    if (dwpe)
      for (int j = 0; j < c; ++j) dwpe[static_cast<long>(i % t) * c + j] += dy[j];
  }
}

}  // namespace parallax::kernels
