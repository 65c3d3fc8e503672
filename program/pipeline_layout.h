// Explicit pipeline layouts: how many transformer layers each model chunk holds, for pipelines
// whose chunks are not equal (Megatron-Core's --pipeline-model-parallel-layout, its
// account_for_embedding/loss_in_pipeline_split, torchtitan's generated split points). A layout
// lists pp x virtual_stages counts in model order: chunk k runs on pipeline rank k % pp as its
// virtual stage k / pp, the order both frameworks place interleaved chunks in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/status.h"

namespace parallax {

// Parses Megatron's layout string: chunks separated by '|', 'E' the embedding (first chunk
// only), 't' one transformer layer, 'L' the loss (last chunk only), 'x*N' and '(...)*N' repeat,
// commas and spaces ignored. "Ett|(ttt|)*2ttL" = {2, 3, 3, 2}. MTP layers ('m') are refused:
// Parallax does not price them. Errors name the position and the character.
Result<std::vector<int64_t>> parse_megatron_layout(const std::string& layout);

// The layout as Megatron writes it, with E on the first chunk and L on the last, runs of equal
// chunks folded: {2, 3, 3, 2} -> "Ett|(ttt|)*2ttL".
std::string megatron_layout_string(const std::vector<int64_t>& chunk_layers);

}  // namespace parallax
