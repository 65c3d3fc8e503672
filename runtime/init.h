// Deterministic parameter initialization that does not depend on the plan: element (i, j) of a
// full parameter tensor gets a normal value from a counter-based generator keyed by (seed,
// tensor id, i * cols + j). A rank holding any shard of the tensor computes exactly the values a
// single rank would, so every parallel plan starts from the same model.
#pragma once

#include <cstdint>

namespace parallax {

// The splitmix64 finalizer: a well-mixed 64-bit hash of x (also behind the synthetic tokens).
uint64_t splitmix64(uint64_t x);

// A standard normal sample for (seed, tensor, index).
float counter_normal(uint64_t seed, uint64_t tensor, uint64_t index);

// Fills dst (rows x cols of local storage) with std * N(0, 1) for the full tensor's element
// (row_offset + r, col_offset + c) of a full tensor that has `full_cols` columns.
void fill_normal(float* dst, int64_t rows, int64_t cols, int64_t row_offset, int64_t col_offset, int64_t full_cols,
                 uint64_t seed, uint64_t tensor, float std);

}  // namespace parallax
