#include "runtime/init.h"

#include <cmath>

namespace parallax {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {
double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
}  // namespace

float counter_normal(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t key = splitmix64(splitmix64(seed ^ 0x5eedULL) ^ splitmix64(tensor + 0x7e5ULL)) ^ index;
  const double u1 = unit(splitmix64(key)), u2 = unit(splitmix64(key ^ 0xabcdef12345ULL));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));  // Box-Muller
}

void fill_normal(float* dst, int64_t rows, int64_t cols, int64_t row_offset, int64_t col_offset, int64_t full_cols,
                 uint64_t seed, uint64_t tensor, float std) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t index = static_cast<uint64_t>((row_offset + r) * full_cols + col_offset + c);
      dst[r * cols + c] = std * counter_normal(seed, tensor, index);
    }
}

}  // namespace parallax
