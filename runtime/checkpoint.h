// Sharded checkpoints: every rank writes its training state to DIR/step-K/rank-R.bin and rank 0 a
// manifest (plan, model, world size, step, each shard's FNV-1a checksum), then DIR/latest names
// the step. Every file is written under a temporary name, flushed to disk and renamed, so a crash
// leaves the previous checkpoint intact. Loading checks the manifest against this run (same plan,
// model and world) and every shard's checksum, on all ranks together.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "runtime/communicator.h"

namespace parallax {

// `identity`: what a resumed run must match (plan, model, world size, seeds, data); `info`: more
// to record in the manifest (loss scale, ...).
Status save_checkpoint(const std::string& dir, int64_t step, const std::string& state, Communicator& world,
                       const nlohmann::json& identity, const nlohmann::json& info = nlohmann::json::object());

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string state;
};
// Errors (the same on every rank): no checkpoint, another plan or model, a corrupt shard.
Result<LoadedCheckpoint> load_checkpoint(const std::string& dir, Communicator& world, const nlohmann::json& identity);

uint64_t fnv1a64(const std::string& bytes);

}  // namespace parallax
