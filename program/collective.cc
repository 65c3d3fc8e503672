#include "program/collective.h"

namespace parallax {

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllGather: return "all-gather";
    case Collective::kSendRecv: return "send";
    case Collective::kAllToAll: return "all-to-all";
  }
  return "?";
}

double collective_bytes_per_rank(Collective op, double bytes, int64_t n) {
  if (op == Collective::kSendRecv) return bytes;
  if (n <= 1) return 0;
  const double share = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (op) {
    case Collective::kAllReduce: return 2 * share * bytes;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return share * bytes;
    case Collective::kSendRecv: break;
  }
  return bytes;
}

}  // namespace parallax
