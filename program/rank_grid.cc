#include "program/rank_grid.h"

#include "program/plan.h"

namespace parallax {

RankGrid::RankGrid(int64_t tp, int64_t dp, int64_t pp, int64_t dp_shard)
    : tp_(static_cast<int>(tp)), dp_(static_cast<int>(dp)), pp_(static_cast<int>(pp)),
      shard_(static_cast<int>(dp_shard > 0 ? dp_shard : dp)) {}

RankGrid::RankGrid(const Plan& plan) : RankGrid(plan.tp, plan.dp, plan.pp, plan.dp_shard) {}

RankCoords RankGrid::coords(int rank) const { return {rank % tp_, (rank / tp_) % dp_, rank / (tp_ * dp_)}; }

GroupMembership RankGrid::group(GroupKind kind, int rank) const {
  const RankCoords c = coords(rank);
  switch (kind) {
    case GroupKind::kTp: return {rank / tp_, c.tp};
    case GroupKind::kDp: return {(c.pp * (dp_ / shard_) + c.dp / shard_) * tp_ + c.tp, c.dp % shard_};
    case GroupKind::kDpReplica: return {(c.pp * shard_ + c.dp % shard_) * tp_ + c.tp, c.dp / shard_};
    case GroupKind::kPp: return {c.dp * tp_ + c.tp, c.pp};
    case GroupKind::kEmbedding: {
      const bool ends = pp_ > 1 && (c.pp == 0 || c.pp == pp_ - 1);
      return {ends ? c.dp * tp_ + c.tp : -1, c.pp};
    }
  }
  return {};
}

int64_t RankGrid::stride(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp: return 1;
    case GroupKind::kDp: return tp_;
    case GroupKind::kPp: return static_cast<int64_t>(tp_) * dp_;
    case GroupKind::kEmbedding: return static_cast<int64_t>(tp_) * dp_ * (pp_ > 1 ? pp_ - 1 : 1);
    case GroupKind::kDpReplica: return static_cast<int64_t>(tp_) * shard_;
  }
  return 1;
}

int64_t RankGrid::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp: return tp_;
    case GroupKind::kDp: return shard_;
    case GroupKind::kDpReplica: return dp_ / shard_;
    case GroupKind::kPp: return pp_;
    case GroupKind::kEmbedding: return pp_ > 1 ? 2 : 1;
  }
  return 1;
}

}  // namespace parallax
