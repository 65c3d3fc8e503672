#include "runtime/cuda/gpu_trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/reduce.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/gpu_model_cache.h"
#include "runtime/cuda/stand_in_communicator.h"
#include "program/pipeline_exchange.h"
#include "runtime/step_executor.h"
#include "runtime/watchdog.h"

namespace parallax {

namespace cu = kernels::cuda;

namespace {

// Start and end events of one recorded op, reused from step to step.
struct EventPair {
  cudaEvent_t begin = nullptr, end = nullptr;
};

template <class T>
class GpuTrainerImpl final : public GpuTrainer, private StepBackend {
 public:
  GpuTrainerImpl(const ModelSpec& m, const Plan& plan, const GpuTrainOptions& o)
      : m_(m), plan_(plan), options_(o), program_(build_step_program(m, plan)) {}
  ~GpuTrainerImpl() override;
  Status init(DeviceCommunicator* world);

  StepStats run_step(int64_t step_index) override;
  const std::vector<OpRecord>& last_step_ops() const override { return records_; }
  const StepProgram& program() const override { return program_; }
  int64_t peak_memory_bytes() const override {
    return DeviceAllocator::instance().peak_bytes() + static_cast<int64_t>(cu::matmul_workspace_bytes());
  }
  int64_t tp_bytes() const override { return tp_->bytes_sent(); }
  int64_t pp_bytes() const override { return pp_->bytes_sent(); }
  int64_t dp_bytes() const override { return dp_->bytes_sent(); }
  const RankCoords& coords() const override { return coords_; }

 private:
  void fill_tokens(int64_t step_index);
  void init_optimizer();
  void plan_piece_work();
  // StepBackend: this rank's share of each program op (runtime/step_executor.h).
  void compute(const ProgramOp& op) override;
  void send(const ProgramOp& op) override { pending_ = op.peer; }
  void recv(const ProgramOp& op) override { exchange(op.peer); }
  void collective(const ProgramOp& op) override;
  double loss_sum() override;
  double gradient_sumsq() override;
  void apply_update(float grad_scale, int update) override;
  void discard_gradients() override {}  // the next step zeroes them
  void op_begin(size_t index, const ProgramOp& op) override;
  void op_end(size_t index, const ProgramOp& op) override;
  // The held-back send (if any) and the receive from `from` (-1: none), as NCCL groups.
  void exchange(int from);
  // DP bucket k: the k-th slice of the flat arrays counted from their end — the layers a backward
  // finishes first (the flat layout is the head, then the layers in order). The slices split the
  // padded arrays evenly on multiples of bucket_unit_, so each divides into dp aligned pieces.
  ElementRange gradient_bucket(int64_t k) const;
  // On the DP stream: bucket k's gradients summed over DP (ZeRO 0: all-reduce; ZeRO-1: a
  // reduce-scatter in place that leaves this rank the sums of its piece), and ZeRO-1's all-gather
  // of bucket k's updated weights from every rank's piece, in place.
  void reduce_bucket(int64_t k);
  void gather_bucket(int64_t k);
  // Program op j, a DP bucket, launched on the DP stream now (from inside the backward).
  void launch_bucket(int32_t j);
  // Records the start of an op on `stream` and returns its index, for close() to record its end.
  size_t mark(int32_t op, cudaStream_t stream);
  void close(size_t op, cudaStream_t stream) { cu::check(cudaEventRecord(events_[op].end, stream), "event"); }
  // Waits for a stream under the NCCL watchdog of the communicator that works on it.
  void sync(DeviceCommunicator& comm, cudaStream_t stream, const char* what) { comm.synchronize(stream, what); }
  void resolve_records();

  ModelSpec m_;
  Plan plan_;
  GpuTrainOptions options_;
  StepProgram program_;
  int64_t count_buckets_ = 1;  // gradient buckets of this stage (one chunk)
  RankCoords coords_;
  std::unique_ptr<Watchdog> dog_;  // real ranks of a world of several
  cudaStream_t compute_ = nullptr, dp_stream_ = nullptr;
  cudaEvent_t step_start_ = nullptr, head_ready_ = nullptr, dp_done_ = nullptr;
  std::unique_ptr<GpuModel<T>> model_;
  std::unique_ptr<DeviceCommunicator> tp_, dp_, pp_, embedding_;
  // What this rank's optimizer owns of the flat arrays: ZeRO 0 one piece, all of them; ZeRO-1 its
  // piece [begin, end) of every DP bucket (index: the bucket), Megatron's distributed-optimizer
  // layout as runtime/distributed_optimizer.h keeps it on CPUs. `state` is where the piece's fp32
  // masters (ZeRO-1's master_shard_) and AdamW moments start; ZeRO 0's equals `begin`.
  struct Piece {
    int64_t begin = 0, end = 0, state = 0;
  };
  std::vector<Piece> pieces_;
  int64_t bucket_unit_ = 128;  // elements: the model pads its arrays to a multiple (128 x ZeRO's shards)
  // Work lists over the pieces: each tensor's part inside a piece (one sum of squares each, for
  // the gradient norm), and runs of elements alike in weight decay clipped to a piece (one AdamW
  // launch each).
  struct NormSegment {
    size_t tensor = 0;
    int64_t begin = 0, end = 0;
  };
  struct AdamRun {
    int64_t begin = 0, end = 0, state = 0;
    bool decay = true;
  };
  std::vector<NormSegment> norm_segments_;
  std::vector<AdamRun> adam_runs_;
  DeviceArray<float> master_shard_, adam_m_, adam_v_, scalar_;
  DeviceArray<double> sumsq_;
  DeviceArray<int> tokens_, targets_;
  DeviceArray<T> stage_in_, stage_out_;
  std::vector<EventPair> events_;
  std::vector<int32_t> kinds_;  // the program op of each used event pair
  size_t used_ = 0;
  std::vector<OpRecord> records_;
  LossScaler scaler_;
  int64_t updates_ = 0;
  // The step being executed.
  int64_t step_index_ = 0;
  float dloss_ = 0;  // the loss gradient of one token (loss scale / tokens)
  std::vector<std::unique_ptr<typename GpuModel<T>::MicroBatch>> states_;  // per micro-batch
  int pending_ = -1;  // the peer the previous op's output still goes to
  size_t current_ = 0;  // the program op being executed
  // overlap_grad_reduce: per program op, the DP buckets that wait for a share of it; per program op,
  // whether it was launched early; an event per layer for the bucket launches.
  std::vector<std::vector<int32_t>> overlap_buckets_;
  std::vector<char> launched_;
  std::vector<cudaEvent_t> layer_events_;
  size_t record_ = 0, send_record_ = 0;  // the current op's and the held-back send's event pairs
};

template <class T>
GpuTrainerImpl<T>::~GpuTrainerImpl() {
  dog_.reset();
  if (compute_) cudaStreamSynchronize(compute_);
  if (dp_stream_) cudaStreamSynchronize(dp_stream_);
  for (EventPair& e : events_) cudaEventDestroy(e.begin), cudaEventDestroy(e.end);
  if (step_start_) cudaEventDestroy(step_start_), cudaEventDestroy(dp_done_), cudaEventDestroy(head_ready_);
  for (cudaEvent_t e : layer_events_) cudaEventDestroy(e);
  model_.reset();
  cu::set_stream(nullptr);  // the thread's kernels must not go on to a destroyed stream
  if (compute_) cudaStreamDestroy(compute_), cudaStreamDestroy(dp_stream_);
}

template <class T>
Status GpuTrainerImpl<T>::init(DeviceCommunicator* world) {
  const bool emulate = options_.emulate_rank >= 0;
  const int rank = emulate ? options_.emulate_rank : world->rank();
  const RankGrid grid(plan_);
  coords_ = grid.coords(rank);
  count_buckets_ = dp_buckets_per_chunk(m_, plan_, coords_.pp);
  const int tp = static_cast<int>(plan_.tp), dp = static_cast<int>(plan_.dp), pp = static_cast<int>(plan_.pp);
  const int shards = plan_.zero == 1 ? dp : 1;
  bucket_unit_ = 128 * static_cast<int64_t>(shards);
  // NcclCommunicator's waits watch themselves, but a rank whose GPU hangs in a collective is
  // mostly not waiting: it blocks inside a kernel launch once the launch queue is full. This
  // thread sees the host issue no op for the limit and ends the rank.
  if (!emulate && world->size() > 1) dog_ = std::make_unique<Watchdog>(world->rank(), options_.watchdog_s);
  if (emulate) {
    tp_ = std::make_unique<StandInCommunicator>(tp, coords_.tp);
    dp_ = std::make_unique<StandInCommunicator>(dp, coords_.dp);
    pp_ = std::make_unique<StandInCommunicator>(pp, coords_.pp);
    const bool ends = coords_.pp == 0 || coords_.pp == pp - 1;
    embedding_ = std::make_unique<StandInCommunicator>(ends && pp > 1 ? 2 : 1, coords_.pp == 0 ? 0 : ends ? 1 : 0);
  } else {
    auto split = [&](GroupKind kind) {
      const GroupMembership g = grid.group(kind, rank);
      return world->split_device(g.color, g.key);  // -1: in no group (null)
    };
    tp_ = split(GroupKind::kTp), dp_ = split(GroupKind::kDp), pp_ = split(GroupKind::kPp);
    embedding_ = split(GroupKind::kEmbedding);
  }
  cu::check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "compute stream");
  cu::check(cudaStreamCreateWithFlags(&dp_stream_, cudaStreamNonBlocking), "dp stream");
  cu::check(cudaEventCreate(&step_start_), "event");
  cu::check(cudaEventCreateWithFlags(&dp_done_, cudaEventDisableTiming), "event");
  cu::check(cudaEventCreateWithFlags(&head_ready_, cudaEventDisableTiming), "event");
  GpuModelOptions mo{tp, coords_.tp, pp, coords_.pp, options_.train.seed, options_.exact_init, plan_.recompute,
                     plan_.sequence_parallel, shards,
                     plan_.uneven() ? plan_.chunk_layers(m_.layers, coords_.pp) : Plan::LayerRange{}};
  mo.split_weight_gradients = splits_weight_gradients(plan_.schedule);
  Result<std::unique_ptr<GpuModel<T>>> model = GpuModel<T>::create(m_, mo, compute_);
  if (!model.ok()) return Error{model.error()};
  model_ = std::move(model).value();
  init_optimizer();
  const StageProgram& stage = program_.stages[coords_.pp];
  overlap_buckets_.assign(stage.ops.size(), {});
  for (size_t j = 0; j < stage.ops.size(); ++j)
    if (stage.ops[j].role == CollectiveRole::kGradientBucket && stage.ops[j].first_wait_fraction < 1)
      overlap_buckets_[stage.ops[j].waits_for[0]].push_back(static_cast<int32_t>(j));
  for (size_t l = 0; l < model_->layer_ranges().size(); ++l) {
    cudaEvent_t e = nullptr;
    cu::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    layer_events_.push_back(e);
  }
  const int64_t tokens = plan_.micro_batches() * plan_.micro_batch * plan_.seq_len;
  tokens_ = DeviceArray<int>(tokens), targets_ = DeviceArray<int>(tokens);
  // Emulated neighbours: a fixed, non-zero boundary activation and gradient.
  const int64_t boundary = model_->local_tokens(static_cast<int>(plan_.micro_batch * plan_.seq_len)) * m_.hidden;
  stage_in_ = DeviceArray<T>(boundary), stage_out_ = DeviceArray<T>(boundary);
  cu::set_stream(compute_);
  cu::fill_uniform(stage_in_.data(), boundary, 7, 1.0f);
  if (plan_.precision == Precision::kFp16) scaler_.scale = LossScaler::kInitial;
  cu::check(cudaStreamSynchronize(compute_), "trainer setup");
  // The high-water mark counts training from here: setup briefly holds ZeRO-1's full fp32 master
  // copy beside its shard, which no step does.
  DeviceAllocator::instance().reset_peak();
  return Status::Ok();
}

// AdamW moments (and for ZeRO-1 the fp32 masters) for the whole model or this rank's pieces.
template <class T>
void GpuTrainerImpl<T>::init_optimizer() {
  const int64_t count = model_->param_count();
  pieces_.clear();
  if (plan_.zero != 1) pieces_.push_back({0, count, 0});
  int64_t state = plan_.zero == 1 ? 0 : count;
  for (int64_t k = 0; plan_.zero == 1 && k < count_buckets_; ++k) {
    const ElementRange r = gradient_bucket(k);
    const int64_t n = (r.end - r.begin) / plan_.dp;  // exact: the bounds are multiples of 128 dp
    pieces_.push_back({r.begin + coords_.dp * n, r.begin + (coords_.dp + 1) * n, state});
    state += n;
  }
  if (plan_.zero == 1) {
    master_shard_ = DeviceArray<float>(state);
    for (const Piece& p : pieces_)
      cu::check(cudaMemcpyAsync(master_shard_.data() + p.state, model_->master() + p.begin,
                                (p.end - p.begin) * sizeof(float), cudaMemcpyDeviceToDevice, compute_), "master shard");
    cu::check(cudaStreamSynchronize(compute_), "master shard");
    model_->release_master();
  }
  adam_m_ = DeviceArray<float>(state), adam_v_ = DeviceArray<float>(state), scalar_ = DeviceArray<float>(1);
  cu::check(cudaMemsetAsync(adam_m_.data(), 0, state * sizeof(float), compute_), "zero moments");
  cu::check(cudaMemsetAsync(adam_v_.data(), 0, state * sizeof(float), compute_), "zero moments");
  plan_piece_work();
}

// The norm's segments and AdamW's runs (runtime/transformer.h: decays) over the pieces. A run
// spans the alignment gaps between its tensors, whose zeros AdamW leaves zero.
template <class T>
void GpuTrainerImpl<T>::plan_piece_work() {
  const std::vector<GpuTensor>& tensors = model_->tensors();
  const bool norms_decay = options_.train.decay_norms_and_biases;
  norm_segments_.clear(), adam_runs_.clear();
  for (const Piece& p : pieces_) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t begin = std::max(tensors[i].offset, p.begin);
      const int64_t end = std::min(tensors[i].offset + tensors[i].size, p.end);
      if (begin < end) norm_segments_.push_back({i, begin, end});
    }
    for (size_t i = 0; i < tensors.size();) {
      const bool decay = decays(tensors[i].role, norms_decay);
      size_t j = i + 1;
      while (j < tensors.size() && decays(tensors[j].role, norms_decay) == decay) ++j;
      const int64_t begin = std::max(i == 0 ? 0 : tensors[i].offset, p.begin);
      const int64_t end = std::min(j == tensors.size() ? model_->param_count() : tensors[j].offset, p.end);
      if (begin < end) adam_runs_.push_back({begin, end, p.state + (begin - p.begin), decay});
      i = j;
    }
  }
  sumsq_ = DeviceArray<double>(static_cast<int64_t>(std::max<size_t>(1, norm_segments_.size())));
}

// The CPU trainer's batches (Trainer::fill_batch): all micro-batches of this DP rank, one upload.
template <class T>
void GpuTrainerImpl<T>::fill_tokens(int64_t step_index) {
  if (!model_->first_stage() && !model_->last_stage()) return;  // middle stages read neither
  const int64_t s = plan_.seq_len, per_rank = plan_.global_batch / plan_.dp;
  std::vector<int> in(static_cast<size_t>(tokens_.size())), out(in.size());
  for (int64_t i = 0; i < per_rank; ++i)
    sequence_tokens(options_.train, m_.vocab, plan_.global_batch, s, step_index, coords_.dp * per_rank + i,
                    in.data() + i * s, out.data() + i * s);
  cu::check(cudaMemcpyAsync(tokens_.data(), in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice, compute_), "tokens");
  cu::check(cudaMemcpyAsync(targets_.data(), out.data(), out.size() * sizeof(int), cudaMemcpyHostToDevice, compute_),
            "targets");
  cu::check(cudaStreamSynchronize(compute_), "tokens");  // `in` and `out` are pageable host memory
}

template <class T>
size_t GpuTrainerImpl<T>::mark(int32_t op, cudaStream_t stream) {
  if (used_ == events_.size()) {
    EventPair e;
    cu::check(cudaEventCreate(&e.begin), "event");
    cu::check(cudaEventCreate(&e.end), "event");
    events_.push_back(e);
  }
  if (kinds_.size() <= used_) kinds_.resize(used_ + 1);
  kinds_[used_] = op;
  if (dog_) dog_->enter("issuing " + op_name(program_.stages[coords_.pp].ops[op]) + " behind GPU work that never finished");
  cu::check(cudaEventRecord(events_[used_].begin, stream), "event");
  return used_++;
}

// Sends are held back and issued with the next receive from the same neighbour (Megatron's
// batched send/recv pairs), or alone before the next F or B; the compute stream waits for each
// group (blocking p2p). program/pipeline_exchange.h checks that these groups cannot deadlock.
// Under emulation the neighbours are stand-ins that count the bytes.
template <class T>
void GpuTrainerImpl<T>::exchange(int from) {
  if (pending_ < 0 && from < 0) return;
  const DType type = model_->dtype();
  const int64_t boundary = stage_in_.size();
  if (pending_ >= 0 && from >= 0 && pending_ != from) exchange(-1);  // only one neighbour's pair travels together
  pp_->group_start();
  if (pending_ >= 0) pp_->send_async(stage_out_.data(), boundary, type, pending_, compute_);
  if (from >= 0) pp_->recv_async(stage_in_.data(), boundary, type, from, compute_);
  pp_->group_end();
  if (pending_ >= 0) close(send_record_, compute_);  // the send is done when its group is
  pending_ = -1;
}

// Each op's events: a send, a receive, a pass and the optimizer on the compute stream, a
// collective on the DP stream. An F or B (not W, which touches no boundary buffer) and the optimizer first flush a
// held-back send.
template <class T>
void GpuTrainerImpl<T>::op_begin(size_t index, const ProgramOp& op) {
  const bool flush = op.type == ProgramOpType::kOptimizer || (op.type == ProgramOpType::kCompute && op.pass != OpKind::kWeight);
  if (flush) exchange(-1);
  current_ = index;
  if (launched_[index]) return;  // a DP bucket already running beside the backward
  const size_t r = mark(static_cast<int32_t>(index), op.type == ProgramOpType::kCollective ? dp_stream_ : compute_);
  (op.type == ProgramOpType::kSend ? send_record_ : record_) = r;
}

// A send's record runs from its op until the group that carries it completes (exchange closes it).
template <class T>
void GpuTrainerImpl<T>::op_end(size_t index, const ProgramOp& op) {
  if (op.type != ProgramOpType::kSend && !launched_[index]) close(record_, op.type == ProgramOpType::kCollective ? dp_stream_ : compute_);
}

template <class T>
void GpuTrainerImpl<T>::compute(const ProgramOp& op) {
  const int b = static_cast<int>(plan_.micro_batch), s = static_cast<int>(plan_.seq_len);
  const int mb = op.micro_batch;
  const int64_t offset = static_cast<int64_t>(mb) * b * s;
  if (op.pass == OpKind::kForward) {
    states_[mb] = model_->new_micro_batch();
    model_->forward(*states_[mb], tokens_.data() + offset, targets_.data() + offset, stage_in_.data(),
                    stage_out_.data(), b, s, dloss_, *tp_, scalar_.data());
  } else {
    // With overlap_grad_reduce, each DP bucket starts as soon as the pass that completes its
    // gradients (B, or ZB-H1's W) has left its layers.
    std::function<void(int)> layer_done;
    if (!overlap_buckets_[current_].empty())
      layer_done = [this](int l) {
        cu::check(cudaEventRecord(layer_events_[l], compute_), "event");
        for (int32_t j : overlap_buckets_[current_]) {
          const int64_t k = program_.stages[coords_.pp].ops[j].bucket;
          if (launched_[j] || gradient_bucket(k).begin < model_->layer_ranges()[l].offset) continue;
          cu::check(cudaStreamWaitEvent(dp_stream_, layer_events_[l]), "wait");
          launch_bucket(j);
        }
      };
    if (op.pass == OpKind::kBackward) {
      model_->backward(*states_[mb], stage_in_.data(), stage_out_.data(), b, s, *tp_, layer_done);
    } else {  // ZB-H1's W: the weight-gradient GEMMs its B left
      model_->weight_backward(*states_[mb], layer_done);
    }
    if (releases_activations(op.pass, plan_.schedule)) states_[mb].reset();
    // The overflow test hook: an inf before any reduction carries to every rank (as the CPU's).
    if (op.pass == OpKind::kBackward && step_index_ == options_.train.inject_overflow_step && coords_ == RankCoords{}) {
      const float inf = std::numeric_limits<float>::infinity();
      cu::check(cudaMemcpyAsync(model_->grads(), &inf, sizeof inf, cudaMemcpyHostToDevice, compute_), "poison");
      sync(*tp_, compute_, "poison");  // `inf` lives on this stack frame
    }
  }
}

template <class T>
ElementRange GpuTrainerImpl<T>::gradient_bucket(int64_t k) const {
  const int64_t units = model_->param_count() / bucket_unit_, slice = count_buckets_ - 1 - k;
  return {slice * units / count_buckets_ * bucket_unit_, (slice + 1) * units / count_buckets_ * bucket_unit_};
}

// A bucket left empty (fewer aligned units than buckets) is empty on every rank alike: no call.
template <class T>
void GpuTrainerImpl<T>::reduce_bucket(int64_t k) {
  const ElementRange r = gradient_bucket(k);
  if (r.end == r.begin) return;
  if (plan_.zero == 0) {
    dp_->all_reduce_async(model_->grads() + r.begin, r.end - r.begin, DType::kF32, ReduceOp::kSum, dp_stream_);
  } else {
    const Piece& p = pieces_[static_cast<size_t>(k)];
    dp_->reduce_scatter_async(model_->grads() + p.begin, model_->grads() + r.begin, p.end - p.begin, DType::kF32,
                              dp_stream_);
  }
}

template <class T>
void GpuTrainerImpl<T>::gather_bucket(int64_t k) {
  const ElementRange r = gradient_bucket(k);
  const Piece& p = pieces_[static_cast<size_t>(k)];
  if (p.end > p.begin)
    dp_->all_gather_async(model_->weights() + r.begin, model_->weights() + p.begin, p.end - p.begin, model_->dtype(),
                          dp_stream_);
}

template <class T>
void GpuTrainerImpl<T>::launch_bucket(int32_t j) {
  const size_t r = mark(j, dp_stream_);
  reduce_bucket(program_.stages[coords_.pp].ops[j].bucket);
  close(r, dp_stream_);
  launched_[j] = 1;
}

// A gradient collective on the DP stream once the compute stream has reached it (or, for a DP
// bucket launched beside the backward, only the compute stream's wait for it).
template <class T>
void GpuTrainerImpl<T>::collective(const ProgramOp& op) {
  if (!launched_[current_]) {
    cu::check(cudaEventRecord(head_ready_, compute_), "event");
    cu::check(cudaStreamWaitEvent(dp_stream_, head_ready_), "wait");
  }
  switch (launched_[current_] ? CollectiveRole::kNone : op.role) {
    case CollectiveRole::kGradientBucket: reduce_bucket(op.bucket); break;
    case CollectiveRole::kWeightBucket: gather_bucket(op.bucket); break;  // after the optimizer (ZeRO-1)
    case CollectiveRole::kEmbedding:  // the first and last stage sum their two copies' gradients
      for (const GpuTensor& t : model_->tensors())
        if (t.name == "wte" || t.name == "wte.copy")
          embedding_->all_reduce_async(model_->grads() + t.offset, t.size, DType::kF32, ReduceOp::kSum, dp_stream_);
      break;
    case CollectiveRole::kNormGradients:  // SP: the norm weights saw only this rank's tokens
      for (const GpuTensor& t : model_->tensors())
        if (t.sp_partial) tp_->all_reduce_async(model_->grads() + t.offset, t.size, DType::kF32, ReduceOp::kSum, dp_stream_);
      break;
    default: break;  // ZeRO-2/3 are refused by check_gpu_support
  }
  cu::check(cudaEventRecord(dp_done_, dp_stream_), "event");
  cu::check(cudaStreamWaitEvent(compute_, dp_done_), "wait");  // the optimizer and the next step read them
}

// As Trainer::gradient_sumsq: TP-replicated tensors and the tied copy count once; the sum over TP
// and PP ranks makes an inf or NaN anywhere reach every rank alike.
template <class T>
double GpuTrainerImpl<T>::gradient_sumsq() {
  const std::vector<GpuTensor>& tensors = model_->tensors();
  cu::set_stream(compute_);
  // Each tensor's parts inside this rank's pieces (all of it without ZeRO).
  for (size_t i = 0; i < norm_segments_.size(); ++i) {
    const NormSegment& g = norm_segments_[i];
    cu::sum_squares(sumsq_.data() + i, model_->grads() + g.begin, g.end - g.begin);
  }
  std::vector<double> parts(norm_segments_.size());
  cu::check(cudaMemcpyAsync(parts.data(), sumsq_.data(), parts.size() * sizeof(double), cudaMemcpyDeviceToHost, compute_),
            "gradient norm");
  sync(*tp_, compute_, "gradient norm");
  double local = 0;
  for (size_t i = 0; i < norm_segments_.size(); ++i) {
    const GpuTensor& t = tensors[norm_segments_[i].tensor];
    if (!(t.tp_replicated && coords_.tp != 0) && t.name != "wte.copy") local += parts[i];
  }
  float sumsq = static_cast<float>(local);
  cu::check(cudaMemcpy(scalar_.data(), &sumsq, sizeof sumsq, cudaMemcpyHostToDevice), "gradient norm");
  tp_->all_reduce(scalar_.data(), 1, ReduceOp::kSum);
  pp_->all_reduce(scalar_.data(), 1, ReduceOp::kSum);
  if (plan_.zero == 1) dp_->all_reduce(scalar_.data(), 1, ReduceOp::kSum);
  cu::check(cudaMemcpy(&sumsq, scalar_.data(), sizeof sumsq, cudaMemcpyDeviceToHost), "gradient norm");
  return sumsq;
}

template <class T>
void GpuTrainerImpl<T>::resolve_records() {
  sync(*tp_, compute_, "end of step");
  sync(*dp_, dp_stream_, "end of step (DP reduction)");
  records_.clear();
  for (size_t i = 0; i < used_; ++i) {
    float start_ms = 0, duration_ms = 0;
    cu::check(cudaEventElapsedTime(&start_ms, step_start_, events_[i].begin), "event time");
    cu::check(cudaEventElapsedTime(&duration_ms, events_[i].begin, events_[i].end), "event time");
    records_.push_back({kinds_[i], false, start_ms * 1e-3, duration_ms * 1e-3});
  }
}

template <class T>
StepStats GpuTrainerImpl<T>::run_step(int64_t step_index) {
  fill_tokens(step_index);
  used_ = 0, pending_ = -1, step_index_ = step_index;
  launched_.assign(program_.stages[coords_.pp].ops.size(), 0);
  states_.clear();
  states_.resize(static_cast<size_t>(plan_.micro_batches()));
  const int64_t count = model_->param_count();
  cu::check(cudaMemsetAsync(model_->grads(), 0, count * sizeof(float), compute_), "zero gradients");
  cu::check(cudaMemsetAsync(scalar_.data(), 0, sizeof(float), compute_), "zero loss");
  cu::check(cudaEventRecord(step_start_, compute_), "event");
  dloss_ = scaler_.scale / static_cast<float>(plan_.global_batch * plan_.seq_len);
  const StepSettings settings{options_.train.clip_norm, step_index == options_.train.skip_step,
                              static_cast<double>(plan_.global_batch * plan_.seq_len)};
  const StepStats stats = execute_step(program_.stages[coords_.pp], *this, scaler_, updates_, settings);
  resolve_records();
  if (dog_) dog_->leave();
  return stats;
}

// The last stage's summed token loss (in scalar_), summed over the stages and DP.
template <class T>
double GpuTrainerImpl<T>::loss_sum() {
  float loss = 0;
  cu::check(cudaMemcpyAsync(&loss, scalar_.data(), sizeof loss, cudaMemcpyDeviceToHost, compute_), "loss");
  sync(*tp_, compute_, "loss");
  if (options_.emulate_rank < 0) {  // real ranks: the last stage's loss, summed over DP
    cu::check(cudaMemcpy(scalar_.data(), &loss, sizeof loss, cudaMemcpyHostToDevice), "loss");
    pp_->all_reduce(scalar_.data(), 1, ReduceOp::kSum);
    dp_->all_reduce(scalar_.data(), 1, ReduceOp::kSum);
    cu::check(cudaMemcpy(&loss, scalar_.data(), sizeof loss, cudaMemcpyDeviceToHost), "loss");
  }
  return loss;
}

// AdamW over this rank's pieces, writing their 16-bit weights; ZeRO-1's program then gathers
// every rank's updated pieces over DP (in place) before the next forward.
template <class T>
void GpuTrainerImpl<T>::apply_update(float grad_scale, int update) {
  float* master = plan_.zero == 1 ? master_shard_.data() : model_->master();  // indexed by AdamRun::state
  kernels::AdamWConfig no_decay = options_.train.adam;
  no_decay.weight_decay = 0;
  cu::set_stream(compute_);
  for (const AdamRun& r : adam_runs_)
    cu::adamw_update(master + r.state, model_->weights() + r.begin, model_->grads() + r.begin, adam_m_.data() + r.state,
                     adam_v_.data() + r.state, r.end - r.begin, r.decay ? options_.train.adam : no_decay, update,
                     grad_scale);
}

template <class T>
Result<std::unique_ptr<GpuTrainer>> make(const ModelSpec& m, const Plan& plan, DeviceCommunicator* world,
                                         const GpuTrainOptions& o) {
  auto t = std::make_unique<GpuTrainerImpl<T>>(m, plan, o);
  if (Status s = t->init(world); !s.ok()) return Error{s.error()};
  return std::unique_ptr<GpuTrainer>(std::move(t));
}

}  // namespace

Result<StepStats> GpuTrainer::step(int64_t step_index) {
  try {
    return run_step(step_index);
  } catch (const std::exception& e) {  // the kernels' and libraries' failures, as one value
    return Error{e.what()};
  }
}

Result<std::unique_ptr<GpuTrainer>> GpuTrainer::create(const ModelSpec& m, const Plan& plan, DeviceCommunicator* world,
                                                       const GpuTrainOptions& o) {
  const bool emulate = o.emulate_rank >= 0;
  if (Status s = check_gpu_support(m, plan, emulate); !s.ok()) return Error{s.error()};
  if (emulate && o.emulate_rank >= plan.gpus())
    return Error{"--emulate-rank " + std::to_string(o.emulate_rank) + " is outside the plan's " +
                 std::to_string(plan.gpus()) + " ranks"};
  if (!emulate && (!world || world->size() != plan.gpus()))
    return Error{"world size " + std::to_string(world ? world->size() : 0) + " does not equal tp x pp x dp = " +
                 std::to_string(plan.gpus())};
  if (!cu::device_available()) return Error{"no CUDA device"};
  try {
    switch (plan.precision) {
      case Precision::kBf16: return make<cu::bf16>(m, plan, world, o);
      case Precision::kFp16: return make<cu::fp16>(m, plan, world, o);
      case Precision::kFp32: return make<float>(m, plan, world, o);
      case Precision::kFp8: break;  // refused by check_gpu_support
    }
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
  return Error{"unknown precision"};
}

}  // namespace parallax
