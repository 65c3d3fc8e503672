// The blocking point-to-point groups a GPU pipeline stage issues while it executes its step
// program, and a check that they cannot deadlock. A send is held back: it travels in one group with
// the next receive when both are with the same neighbour (Megatron's send_forward_recv_backward /
// send_backward_recv_forward), else alone before the next F or B (a ZB-H1 W touches no boundary
// buffer, so a send waits past it). The stage's compute stream waits for each group. NCCL matches
// a pair's transfers in issue order, a transfer larger than NCCL's buffers completes only when both
// sides have posted it, and a group's transfers to different peer distances may run one round
// after another; check_exchanges plays all of that.
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

// The groups a GPU stage issues while it executes its program (runtime/cuda/gpu_trainer.cc).
std::vector<P2pGroup> pipeline_exchanges(const StageProgram& stage);

// Plays every stage's groups in order, a transfer completing only with its partner (the
// rendezvous case). Errors name the schedule and the first stage that would wait forever, or a
// transfer whose two sides carry different micro-batches.
Status check_exchanges(const StepProgram& program);

}  // namespace parallax
