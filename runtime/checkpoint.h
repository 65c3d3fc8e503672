// Checkpoints that any plan can resume from. Every rank writes the parameters it owns (one replica
// of each: DP and CP rank 0, TP rank 0 of a replicated tensor, expert-DP rank 0 of an expert) as
// DIR/step-K/rank-R.safetensors — a safetensors file of fp32 vectors: each tensor's local shard
// `NAME`, its AdamW moments `NAME.exp_avg` and `NAME.exp_avg_sq`, and in the metadata the full
// shape and the pieces of the full tensor the shard holds. Rank 0 then writes a manifest (step,
// counters, the plan and world it was written by, each file's FNV-1a checksum) and DIR/latest
// names the step. Each file is written under a temporary name, flushed and renamed, so a crash
// leaves the previous checkpoint intact.
//
// Loading reads every rank's file, checks the checksums, and reassembles full tensors, which the
// trainer reslices for its own plan: a run resumes onto another TP, PP, DP, CP, EP or ZeRO layout
// of the same model and data. The format, key by key: docs/formats.md; tools/checkpoint_reader.py
// turns a checkpoint into a Hugging Face-style state dict.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "runtime/buffer.h"
#include "runtime/communicator.h"
#include "runtime/transformer.h"

namespace parallax {

// One parameter's local shard and its optimizer moments, as a rank saves it.
struct TensorShard {
  std::string name;
  std::vector<int64_t> shape;       // the full tensor's
  std::vector<ParamPiece> pieces;   // where the shard's elements sit in it
  Buffer value, exp_avg, exp_avg_sq;
};

// A full tensor reassembled from the shards of any plan.
struct FullTensor {
  std::vector<int64_t> shape;
  Buffer value, exp_avg, exp_avg_sq;
};
using CheckpointTensors = std::map<std::string, FullTensor>;

// The elements of `pieces` of a full tensor of `shape` ([n] or [rows, cols]), in shard order, to
// `out`; and back.
void take_pieces(const float* full, const std::vector<int64_t>& shape, const std::vector<ParamPiece>& pieces, float* out);
void put_pieces(float* full, const std::vector<int64_t>& shape, const std::vector<ParamPiece>& pieces, const float* in);
int64_t elements(const std::vector<int64_t>& shape);

// The safetensors bytes of one rank's shards, and back (errors name `where` and the tensor).
std::string encode_shards(const std::vector<TensorShard>& shards, int rank);
Result<std::vector<TensorShard>> decode_shards(const std::string& bytes, const std::string& where);

// `identity`: what a resumed run must match (model, batch, seeds, data); `info`: more to record in
// the manifest (counters, the plan and world size that wrote it).
Status save_checkpoint(const std::string& dir, int64_t step, const std::vector<TensorShard>& shards,
                       Communicator& world, const nlohmann::json& identity,
                       const nlohmann::json& info = nlohmann::json::object());

struct LoadedCheckpoint {
  int64_t step = 0;
  nlohmann::json manifest;
  CheckpointTensors tensors;
};
// Errors (the same on every rank): no checkpoint, another model or data, a corrupt file.
Result<LoadedCheckpoint> load_checkpoint(const std::string& dir, Communicator& world, const nlohmann::json& identity);

uint64_t fnv1a64(const std::string& bytes);

}  // namespace parallax
