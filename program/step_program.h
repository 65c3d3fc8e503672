// StepProgram: one training step of a plan as what every rank of each pipeline stage issues, in
// order — compute passes (F, B, W of a micro-batch through a model chunk), pipeline sends and
// receives, data-parallel and other collectives, and the optimizer step — each with its canonical
// trace name, stream, communication group, bytes (nccl-tests accounting, program/collective.h),
// the earlier ops it waits for, and whether it frees a micro-batch's activations.
//
// The simulator lowers it to a task graph (planner/lowering.h) with per-op durations from the
// cost model; the CPU and GPU runtimes execute it through one step executor
// (runtime/step_executor.h) and trace every op under the same name. So a predicted and a measured
// trace of one plan hold the same events, and `compare` matches them by construction.
//
// Issue order on a stage, for each pipeline op of program/schedule.h:
//   [ZeRO-3: all-gather of the chunk's weights]  [receive of the input]  compute
//   [send of the output]  [ZeRO-2/3: gradient reduce-scatter]
// (ZeRO-3's gathers and ZeRO-2/3's reductions go unit by unit — one layer each — beneath the pass:
// the pass waits for its first unit's weights, the reduction starts after its first unit.)
// after a chunk's last releasing op (its last B; ZB-H1: its last W) the chunk's gradient
// collectives (SP norm all-reduce over TP, the tied-embedding all-reduce, DP buckets — right
// there with overlap_grad_reduce, else after the stage's last op; a chunk holding a tied
// embedding always after the stage's last op, since that all-reduce joins two stages), then
// `optimizer`, then ZeRO-1/2's weight all-gathers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "program/collective.h"
#include "program/plan.h"
#include "program/rank_grid.h"
#include "program/schedule.h"
#include "program/trace_schema.h"

namespace parallax {

enum class ProgramOpType : uint8_t {
  kCompute,     // F, B or W (`pass`) of (micro_batch, chunk)
  kSend,        // the output of `pass` (mb, chunk) to pipeline stage `peer`
  kRecv,        // the input of `pass` (mb, chunk) from pipeline stage `peer`
  kCollective,  // `collective` over `group`, for the `role` below
  kOptimizer,   // gradient norm, clipping, loss scaling (skip on overflow), AdamW
};

// What a collective is for.
enum class CollectiveRole : uint8_t {
  kNone,
  kGradientBucket,  // DP: reduce bucket `bucket` = chunk * buckets per chunk + k (ZeRO 0: all-reduce; 1: reduce-scatter)
  kGradientShard,   // DP, ZeRO-2/3: reduce-scatter one micro-batch's gradients into the shards
  kWeightBucket,    // DP, ZeRO-1/2: all-gather bucket `bucket` of updated weights after the optimizer
  kWeightGather,    // DP, ZeRO-3: all-gather the weights of `chunk` before pass (mb, chunk)
  kNormGradients,   // TP with SP: all-reduce the norm weights' partial gradients of `chunk`
  kEmbedding,       // first + last stage: all-reduce the tied embedding's gradient
  kReplicaReduce,   // hybrid sharding: all-reduce a reduced gradient shard over the DP replicas
  kExpertGradients, // EP: reduce chunk `chunk`'s expert gradients over the expert data-parallel ranks
                    // (ZeRO-2/3: each pass's, reduce-scattered after it)
  kExpertWeights,   // EP, ZeRO-1/2: all-gather the updated expert weights over the same ranks
                    // (ZeRO-3: before pass (mb, chunk))
};

// The earlier ops (indices in the stage's list) an op waits for: at most four (a compute op: its
// receive, its ZeRO-3 gather, a blocking send and a blocking reduction), kept inline.
class OpWaits {
 public:
  OpWaits() = default;
  OpWaits(std::initializer_list<int32_t> ops) {
    for (int32_t op : ops) push_back(op);
  }
  void push_back(int32_t op) {
    if (n_ == kMax) throw std::logic_error("an op waits for more than 4 ops");
    at_[n_++] = op;
  }
  void clear() { n_ = 0; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int32_t operator[](size_t i) const { return at_[i]; }
  const int32_t* begin() const { return at_; }
  const int32_t* end() const { return at_ + n_; }

 private:
  static constexpr uint8_t kMax = 4;
  int32_t at_[kMax] = {};
  uint8_t n_ = 0;
};

struct ProgramOp {
  ProgramOpType type = ProgramOpType::kCompute;
  CollectiveRole role = CollectiveRole::kNone;
  OpKind pass = OpKind::kForward;  // compute; send/recv: the pass whose output moves; weight gather
  Collective collective = Collective::kSendRecv;
  GroupKind group = GroupKind::kPp;
  StreamKind stream = StreamKind::kCompute;
  bool frees_activations = false;  // the last use of (mb, chunk)'s saved activations
  // Compute (execution.moe_a2a_overlap): a forward or backward the schedule runs next to the
  // opposite pass of another (micro-batch, chunk), whose compute hides its expert all-to-alls.
  bool exchange_overlapped = false;
  int32_t micro_batch = -1, chunk = -1;
  int32_t bucket = -1;
  int32_t peer = -1;  // send/recv: the other pipeline stage
  // Earlier ops of this stage that must finish before this one starts, besides the previous op on
  // its stream. The first may be waited for only up to `first_wait_fraction` of its duration: a DP
  // bucket needs just its layers' share of the last backward, a ZeRO-2/3 shard reduction the
  // pass's first unit (layer), a ZeRO-3 pass its first unit's share of its weight gather.
  float first_wait_fraction = 1;
  OpWaits waits_for;
  // Communication: the full buffer (nccl-tests S). Compute: the full buffers of the TP collectives
  // inside it, summed.
  double bytes = 0;
  double sent_bytes = 0;  // bytes this rank sends (nccl-tests accounting)
};
static_assert(sizeof(ProgramOp) <= 64, "a deep pipeline's program holds millions of ops");

// The canonical trace name: "F mb=3 chunk=0", "send pp F mb=3 chunk=0" (the output of that F),
// "recv pp B mb=3 chunk=1" (the gradient B mb=3 chunk=1 needs), "allreduce dp bucket=2",
// "reduce-scatter dp mb=3 chunk=0", "all-gather dp bucket=1", "all-gather dp F mb=3 chunk=0",
// "allreduce tp norms chunk=0", "allreduce embedding", "allreduce expert-dp chunk=0" (ZeRO-2/3:
// "reduce-scatter expert-dp mb=3 chunk=0", "all-gather expert-dp F mb=3 chunk=0"),
// "all-gather expert-dp", "optimizer".
std::string op_name(const ProgramOp& op);
// The TP collectives inside compute op `op`, as one event on the tp track: "tp F mb=3 chunk=0".
std::string tp_event_name(const ProgramOp& op);

// The TP collectives of one layer in one pass for one micro-batch: `count` collectives on
// buffers of `bytes` (b s h activations). Without SP two all-reduces forward and two backward;
// with SP an all-gather and a reduce-scatter in their place (same bytes, Korthikanti et al.), and
// W re-gathers the two sequence-sharded GEMM inputs; full recompute repeats the forward's in B.
// The share of a bf16 activation's bytes an SP all-gather moves: FP8 plans quantize the QKV and
// FC1 inputs (forward, and again for their weight gradients) and the output gradients of the
// projection and FC2 before gathering them, one byte an element (Transformer Engine's
// gather_along_first_dim with the GEMM's quantizer; torchtitan's Float8ColwiseParallel and
// PrepareFloat8ModuleInput for tensorwise scaling); reduce-scatters stay in bf16. torchao's
// rowwise scaling gathers in bf16 (its FP8 all-gather never landed, pytorch/ao#2145).
double sp_gather_share(const Plan& plan);

struct TpTraffic {
  double count = 0;  // per layer; a fraction where only some layers recompute
  double bytes = 0;      // one collective's full buffer
  double sent_bytes = 0; // what this rank sends for all `count`
};
TpTraffic tp_traffic(const ModelSpec& m, const Plan& plan, OpKind pass);

// Gradient buckets per model chunk: the chunk's gradient bytes over execution.dp_bucket_mib (with
// megatron_buckets, Megatron-Core's rule), rounded up, between 1 and 64 (which keeps the task count
// bounded). Both runtimes cut a chunk's flat gradient into this many equal ranges (bucket_range).
int64_t dp_buckets_per_chunk(const ModelSpec& m, const Plan& plan, int64_t stage);
struct ElementRange {
  int64_t begin = 0, end = 0;
};
// Bucket k of n of `elements` values: [k ceil(E/n), min((k+1) ceil(E/n), E)).
ElementRange bucket_range(int64_t elements, int64_t n, int64_t k);

struct StageProgram {
  std::vector<ProgramOp> ops;
  std::vector<PipelineOp> schedule;  // the pipeline ops, in order (the compute ops above)
};

struct StepProgram {
  Plan plan;
  RankGrid grid;
  std::vector<StageProgram> stages;
  double boundary_bytes = 0;  // one pipeline transfer, per GPU
  // Per stage and chunk (index stage x virtual_stages + chunk): its layers, and one micro-batch's
  // activations through them (16-bit).
  std::vector<int64_t> chunk_layers;
  std::vector<double> pass_activation_bytes;
  int64_t layers_of(int64_t stage, int64_t chunk) const { return chunk_layers[index(stage, chunk)]; }
  double activation_bytes_per_pass(int64_t stage, int64_t chunk) const { return pass_activation_bytes[index(stage, chunk)]; }
  size_t index(int64_t stage, int64_t chunk) const { return static_cast<size_t>(stage * plan.virtual_stages + chunk); }
};

// Precondition: check_plan(plan, m, ...) is ok.
StepProgram build_step_program(const ModelSpec& m, const Plan& plan);

// The virtual stage the output of `pass` (mb, chunk) on `stage` goes to (F: the next, B: the
// previous), or -1 for none.
int64_t send_target(const Plan& plan, OpKind pass, int64_t chunk, int64_t stage);

}  // namespace parallax
