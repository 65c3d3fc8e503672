// Plans shared by the planner tests.
#pragma once

#include "program/plan.h"

namespace parallax::testing_support {

// TP 8 x PP 4 x DP 2, ZeRO-1, interleaved with 2 chunks, selective recompute, SP, s 4096, B 64:
// valid for Llama-2-70B (64 heads, 8 KV heads, 80 layers).
inline Plan interleaved_plan(int64_t micro_batch = 1) {
  Plan p;
  p.tp = 8;
  p.pp = 4;
  p.dp = 2;
  p.zero = 1;
  p.micro_batch = micro_batch;
  p.global_batch = 64;
  p.seq_len = 4096;
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  p.recompute = Recompute::kSelective;
  p.sequence_parallel = true;
  return p;
}

}  // namespace parallax::testing_support
