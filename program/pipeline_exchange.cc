#include "program/pipeline_exchange.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace parallax {

std::vector<P2pGroup> pipeline_exchanges(const StageProgram& stage) {
  std::vector<P2pGroup> groups;
  P2pGroup pending;  // the previous op's output, still to be sent
  auto flush = [&] {
    if (!pending.empty()) groups.push_back(pending);
    pending = P2pGroup{};
  };
  for (const ProgramOp& op : stage.ops) {
    if (op.type == ProgramOpType::kSend) {
      pending.send_to = op.peer, pending.send_micro_batch = op.micro_batch;
    } else if (op.type == ProgramOpType::kRecv) {
      if (pending.send_to != op.peer) flush();  // only a pair with one neighbour travels together
      pending.recv_from = op.peer, pending.recv_micro_batch = op.micro_batch;
      flush();
    } else if ((op.type == ProgramOpType::kCompute && op.pass != OpKind::kWeight) || op.type == ProgramOpType::kOptimizer) {
      flush();  // a W reads and writes nothing at the stage boundary: a send waits past it
    }
  }
  flush();
  return groups;
}

namespace {

// One transfer: the n-th from `from` to `to` (NCCL matches in issue order per pair).
using Transfer = std::pair<std::pair<int, int>, int>;
using Step = std::vector<Transfer>;

struct StageSteps {
  std::vector<Step> steps;  // the non-empty rounds of the stage's groups, in order
  size_t next = 0;
};

// Every stage's steps; `sent` and `received` collect the micro-batch of each transfer per
// (from, to). NCCL runs a group's transfers in rounds by peer distance: round d sends to s + d
// and receives from s - d (mod pp). Rounds may run one after another, so each is its own step.
std::vector<StageSteps> stage_steps(const StepProgram& program, int pp,
                                    std::map<std::pair<int, int>, std::vector<int>>& sent,
                                    std::map<std::pair<int, int>, std::vector<int>>& received) {
  std::vector<StageSteps> stages(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    for (const P2pGroup& g : pipeline_exchanges(program.stages[s])) {
      Step send, recv;
      if (g.send_to >= 0) {
        auto& list = sent[{s, g.send_to}];
        send.push_back({{s, g.send_to}, static_cast<int>(list.size())}), list.push_back(g.send_micro_batch);
      }
      if (g.recv_from >= 0) {
        auto& list = received[{g.recv_from, s}];
        recv.push_back({{g.recv_from, s}, static_cast<int>(list.size())}), list.push_back(g.recv_micro_batch);
      }
      const int send_round = (g.send_to - s + pp) % pp, recv_round = (s - g.recv_from + pp) % pp;
      std::vector<Step>& out = stages[s].steps;
      if (!send.empty() && !recv.empty() && send_round == recv_round) {
        send.push_back(recv.front()), out.push_back(send);
      } else if (!send.empty() && !recv.empty()) {
        out.push_back(send_round < recv_round ? send : recv), out.push_back(send_round < recv_round ? recv : send);
      } else if (!send.empty() || !recv.empty()) {
        out.push_back(send.empty() ? recv : send);
      }
    }
  }
  return stages;
}

}  // namespace

Status check_exchanges(const StepProgram& program) {
  const int pp = static_cast<int>(program.plan.pp);
  std::map<std::pair<int, int>, std::vector<int>> sent, received;  // micro-batches per (from, to)
  std::vector<StageSteps> stages = stage_steps(program, pp, sent, received);
  const std::string name = std::string(schedule_name(program.plan.schedule)) + " with pp " + std::to_string(pp) + " and " +
                           std::to_string(program.plan.micro_batches()) + " micro-batches";
  if (sent != received) return Error{name + ": a stage receives other micro-batches than its neighbour sends"};
  // A transfer completes once both sides hold it in their current steps; a step ends once all its
  // transfers have completed (a send and a receive of one round progress together).
  std::set<Transfer> done;
  auto current = [&](int s) -> const Step* {
    return stages[s].next < stages[s].steps.size() ? &stages[s].steps[stages[s].next] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      if (const Step* g = current(s))
        for (const Transfer& t : *g) {
          const Step* pg = current(t.first.first == s ? t.first.second : t.first.first);
          if (!done.count(t) && pg && std::find(pg->begin(), pg->end(), t) != pg->end()) done.insert(t), progress = true;
        }
    }
    for (int s = 0; s < pp; ++s) {
      const Step* g = current(s);
      if (g && std::all_of(g->begin(), g->end(), [&](const Transfer& t) { return done.count(t) > 0; }))
        ++stages[s].next, progress = true;
    }
  }
  for (int s = 0; s < pp; ++s)
    if (stages[s].next < stages[s].steps.size())
      return Error{name + ": stage " + std::to_string(s) + " would wait forever in send/receive step " +
                   std::to_string(stages[s].next + 1) + " of " + std::to_string(stages[s].steps.size())};
  return Status::Ok();
}

}  // namespace parallax
