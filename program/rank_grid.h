// RankGrid: the one rank layout of Parallax. World rank r of a TP x DP x PP plan sits at
//   tp = r % t,  dp = (r / t) % d,  pp = r / (t d)
// — TP innermost (a TP group is t consecutive ranks, inside one node), then DP, then PP. The
// simulator places groups on nodes from the strides below, and both runtimes split their world
// communicator with the colors below; nothing else computes a rank layout.
#pragma once

#include <cstdint>

namespace parallax {

struct Plan;

struct RankCoords {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoords&) const = default;
};

// The communication groups a rank belongs to. kEmbedding joins the first and the last pipeline
// stage of one (tp, dp) position: with tied embeddings both hold the embedding and sum its gradient.
// kDp is the group ZeRO shards over: all of DP, or with hybrid sharding (dp_shard s) s consecutive
// DP ranks; kDpReplica joins the ranks holding the same shard in the d / s replicas (size 1
// without hybrid sharding).
enum class GroupKind : uint8_t { kTp, kDp, kPp, kEmbedding, kDpReplica };
inline constexpr int kGroupKinds = 5;

// Ranks with equal color form one group, ordered by key; color -1: the rank is in no such group.
struct GroupMembership {
  int color = -1, key = 0;
};

class RankGrid {
 public:
  RankGrid(int64_t tp = 1, int64_t dp = 1, int64_t pp = 1, int64_t dp_shard = 0);
  explicit RankGrid(const Plan& plan);

  int size() const { return tp_ * dp_ * pp_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  RankCoords coords(int rank) const;
  int rank(const RankCoords& c) const { return (c.pp * dp_ + c.dp) * tp_ + c.tp; }
  GroupMembership group(GroupKind kind, int rank) const;
  // Ranks between consecutive members of a group of `kind`: TP 1, DP t, PP t d, embedding
  // (first and last stage) t d (p - 1), DP replicas t s.
  int64_t stride(GroupKind kind) const;
  int64_t group_size(GroupKind kind) const;
  // The rank whose trace stands for pipeline stage `stage`: TP 0, DP 0 (all TP and DP ranks of a
  // stage run the same program).
  int representative(int stage) const { return rank({0, 0, stage}); }

 private:
  int tp_, dp_, pp_, shard_;
};

}  // namespace parallax
