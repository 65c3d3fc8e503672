// Collective kinds and the one byte accounting every part of Parallax uses: the nccl-tests
// convention (docs/formats.md, cluster). For a collective over n ranks whose full buffer is S bytes,
// each rank sends
//   all-reduce      2(n-1)/n * S
//   reduce-scatter  (n-1)/n * S      (S: the whole input, n shards)
//   all-gather      (n-1)/n * S      (S: the whole output)
//   all-to-all      (n-1)/n * S      (S: the rank's whole input, S/n to each rank, itself included)
//   send/recv       S                (the sender)
// The simulator prices these bytes and the runtimes' communicators count them, so a measured and
// a predicted byte count mean the same thing.
#pragma once

#include <cstdint>

namespace parallax {

enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather, kSendRecv, kAllToAll };

// "allreduce", "reduce-scatter", "all-gather", "send", "all-to-all": the words of trace event names.
const char* collective_name(Collective op);

// Bytes each rank sends for `op` over `n` ranks on a full buffer of `bytes`; a collective over a
// group of one sends nothing.
double collective_bytes_per_rank(Collective op, double bytes, int64_t n);

}  // namespace parallax
