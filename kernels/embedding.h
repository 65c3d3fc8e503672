// Token (and learned position) embedding, vocab-parallel: a rank holds rows [vocab_start,
// vocab_start + vocab_local) of the token table and writes zeros for tokens outside its shard, so
// that summing over the TP group (an all-reduce) yields the full embedding.
#pragma once

namespace parallax::kernels {

// out [N, C] for tokens [N]; wpe [T, C] may be null (rotary models); token n sits at position
// n % t. Positions are added only where `add_positions` (one TP rank, so the all-reduce counts
// them once).
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int n, int t, int c,
                       int vocab_start, int vocab_local, bool add_positions);
// Accumulates into dwte (and dwpe when non-null).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int n, int t, int c,
                        int vocab_start, int vocab_local);

}  // namespace parallax::kernels
