#include "program/rank_grid.h"

#include "program/plan.h"

namespace parallax {

RankGrid::RankGrid(int64_t tp, int64_t dp, int64_t pp, int64_t dp_shard, int64_t cp, int64_t ep, int64_t etp)
    : tp_(static_cast<int>(tp)), cp_(static_cast<int>(cp)), data_(static_cast<int>(cp * dp)), pp_(static_cast<int>(pp)),
      shard_(static_cast<int>(dp_shard > 0 ? dp_shard : cp * dp)), ep_(static_cast<int>(ep)),
      etp_(static_cast<int>(etp > 0 ? etp : tp)) {}

RankGrid::RankGrid(const Plan& plan) : RankGrid(plan.tp, plan.dp, plan.pp, plan.dp_shard, plan.cp, plan.ep, plan.etp) {}

RankCoords RankGrid::coords(int rank) const {
  const int e = (rank / tp_) % data_;
  return {rank % tp_, e / cp_, rank / (tp_ * data_), e % cp_};
}

GroupMembership RankGrid::group(GroupKind kind, int rank) const {
  const RankCoords c = coords(rank);
  const int e = c.dp * cp_ + c.cp;  // the data index
  // The expert layout: this rank's place q in its stage as (expert DP, EP, expert TP) indices.
  const int q = e * tp_ + c.tp, slots = data_ * tp_ / etp_;
  const int etp_i = q % etp_, ep_i = (q / etp_) % ep_, edp_i = q / (etp_ * ep_);
  switch (kind) {
    case GroupKind::kTp: return {rank / tp_, c.tp};
    case GroupKind::kDp: return {(c.pp * (data_ / shard_) + e / shard_) * tp_ + c.tp, e % shard_};
    case GroupKind::kDpReplica: return {(c.pp * shard_ + e % shard_) * tp_ + c.tp, e / shard_};
    case GroupKind::kPp: return {e * tp_ + c.tp, c.pp};
    case GroupKind::kEmbedding: {
      const bool ends = pp_ > 1 && (c.pp == 0 || c.pp == pp_ - 1);
      return {ends ? e * tp_ + c.tp : -1, c.pp};
    }
    case GroupKind::kCp: return {(c.pp * (data_ / cp_) + c.dp) * tp_ + c.tp, c.cp};
    case GroupKind::kEp: return {(c.pp * (slots / ep_) + edp_i) * etp_ + etp_i, ep_i};
    case GroupKind::kExpertDp: return {(c.pp * ep_ + ep_i) * etp_ + etp_i, edp_i};
  }
  return {};
}

int64_t RankGrid::stride(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp: return 1;
    case GroupKind::kDp:
    case GroupKind::kCp: return tp_;
    case GroupKind::kEp: return etp_;
    case GroupKind::kPp: return static_cast<int64_t>(tp_) * data_;
    case GroupKind::kEmbedding: return static_cast<int64_t>(tp_) * data_ * (pp_ > 1 ? pp_ - 1 : 1);
    case GroupKind::kDpReplica: return static_cast<int64_t>(tp_) * shard_;
    case GroupKind::kExpertDp: return static_cast<int64_t>(etp_) * ep_;
  }
  return 1;
}

int64_t RankGrid::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp: return tp_;
    case GroupKind::kDp: return shard_;
    case GroupKind::kDpReplica: return data_ / shard_;
    case GroupKind::kPp: return pp_;
    case GroupKind::kEmbedding: return pp_ > 1 ? 2 : 1;
    case GroupKind::kCp: return cp_;
    case GroupKind::kEp: return ep_;
    case GroupKind::kExpertDp: return static_cast<int64_t>(data_) * tp_ / etp_ / ep_;
  }
  return 1;
}

}  // namespace parallax
