// Shared by the planner tests of MoE, CP and FP8: bundled models, the round test cluster, and a
// plan of micro-batch 1 with one sequence per DP rank.
#pragma once

#include <string>

#include "models/model_spec.h"
#include "program/plan.h"
#include "simulator/cluster_spec.h"
#include "../simulator/test_cluster.h"

namespace parallax::testing_support {

inline ModelSpec load(const std::string& name) { return load_model(name).value(); }
inline ClusterSpec round_cluster() { return cluster_from_json(round_cluster_json(), "round").value(); }

inline Plan plan(int64_t tp, int64_t cp, int64_t dp, int64_t ep, int64_t seq_len) {
  Plan p;
  p.tp = tp, p.cp = cp, p.dp = dp, p.ep = ep;
  p.seq_len = seq_len;
  p.micro_batch = 1;
  p.global_batch = dp;
  return p;
}

}  // namespace parallax::testing_support
