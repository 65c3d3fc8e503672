// The blocking point-to-point groups a GPU pipeline stage issues between its ops, and a check
// that a schedule's groups cannot deadlock. At each op boundary a stage issues one group that
// sends the previous op's output and receives this op's input (Megatron's batched send/recv
// pairs); the stage's compute stream waits for the whole group. NCCL matches a pair's transfers
// in issue order, a transfer larger than NCCL's buffers completes only when both sides have posted
// it, and a group's transfers to different peer distances may run one round after another. Whether
// every stage gets through depends on the schedule: 1F1B and GPipe always pair up; ZB-H1's
// order must be checked (check_exchanges).
#pragma once

#include <vector>

#include "models/status.h"
#include "program/step_program.h"

namespace parallax {

// One group; -1 where it has no send or no receive. Stages are pipeline ranks.
struct P2pGroup {
  int send_to = -1, send_micro_batch = -1;
  int recv_from = -1, recv_micro_batch = -1;
  bool empty() const { return send_to < 0 && recv_from < 0; }
  bool operator==(const P2pGroup&) const = default;
};

// The groups a GPU stage issues while it executes its program (runtime/cuda/gpu_trainer.cc): a
// send is held back and issued with the next receive, or alone before the next compute op.
std::vector<P2pGroup> pipeline_exchanges(const StageProgram& stage);

// Plays every stage's groups in order, a transfer completing only with its partner (the
// rendezvous case). Errors name the schedule and the first stage that would wait forever, or a
// transfer whose two sides carry different micro-batches.
Status check_exchanges(const StepProgram& program);

}  // namespace parallax
