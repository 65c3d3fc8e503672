// RankGrid: the one rank layout of Parallax. World rank r of a TP x CP x DP x PP plan sits at
//   tp = r % t,  cp = (r / t) % c,  dp = (r / (t c)) % d,  pp = r / (t c d)
// — TP innermost (a TP group is t consecutive ranks, inside one node), then CP, then DP, then PP,
// Megatron-Core's tp-cp-dp-pp order. The c x d ranks of a (tp, pp) position hold the same dense
// weights: their data index e = cp + c dp runs over them. Expert parallelism splits them into
// groups of ep consecutive e (Megatron-Core's tp-cp-ep-dp-pp: EP sits where CP and DP do), the
// experts' data-parallel group the ranks ep apart. With expert TP below TP, an expert layer sees a
// stage's t c d ranks, numbered q = e t + tp, as ETP x EP x expert-DP: q = (edp ep + ep) etp + etp. The simulator places groups on nodes from the
// strides below, and both runtimes split their world communicator with the colors below; nothing
// else computes a rank layout.
#pragma once

#include <cstdint>

namespace parallax {

struct Plan;

struct RankCoords {
  int tp = 0, dp = 0, pp = 0, cp = 0;
  bool operator==(const RankCoords&) const = default;
};

// The communication groups a rank belongs to. kEmbedding joins the first and the last pipeline
// stage of one (tp, cp, dp) position: with tied embeddings both hold the embedding and sum its
// gradient. kDp is the group dense gradients reduce and ZeRO shards over: all c x d data ranks,
// or with hybrid sharding (dp_shard s) s consecutive ones; kDpReplica joins the ranks holding the
// same shard in the c d / s replicas (size 1 without hybrid sharding). kCp: the c ranks sharing
// each sequence. kEp: ep consecutive data ranks exchanging tokens; kExpertDp: the c d / ep ranks
// holding the same experts.
enum class GroupKind : uint8_t { kTp, kDp, kPp, kEmbedding, kDpReplica, kCp, kEp, kExpertDp };
inline constexpr int kGroupKinds = 8;

// Ranks with equal color form one group, ordered by key; color -1: the rank is in no such group.
struct GroupMembership {
  int color = -1, key = 0;
};

class RankGrid {
 public:
  RankGrid(int64_t tp = 1, int64_t dp = 1, int64_t pp = 1, int64_t dp_shard = 0, int64_t cp = 1, int64_t ep = 1,
           int64_t etp = 0);
  explicit RankGrid(const Plan& plan);

  int size() const { return tp_ * data_ * pp_; }
  int tp() const { return tp_; }
  int dp() const { return data_ / cp_; }
  int cp() const { return cp_; }
  int pp() const { return pp_; }
  RankCoords coords(int rank) const;
  int rank(const RankCoords& c) const { return (c.pp * data_ + c.dp * cp_ + c.cp) * tp_ + c.tp; }
  GroupMembership group(GroupKind kind, int rank) const;
  // Ranks between consecutive members of a group of `kind`: TP 1, CP and DP t, EP etp, PP t c d,
  // embedding (first and last stage) t c d (p - 1), DP replicas t s, expert DP etp ep.
  int64_t stride(GroupKind kind) const;
  int64_t group_size(GroupKind kind) const;
  // The rank whose trace stands for pipeline stage `stage`: TP 0, CP 0, DP 0 (all TP, CP and DP
  // ranks of a stage run the same program).
  int representative(int stage) const { return rank({0, 0, stage, 0}); }

 private:
  int tp_, cp_, data_, pp_, shard_, ep_, etp_;  // data_ = c x d
};

}  // namespace parallax
