#include "runtime/trainer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <fstream>
#include <sstream>
#include <map>

#include "runtime/init.h"
#include "runtime/transformer_cache.h"

namespace parallax {

RankCoords rank_coords(const Plan& plan, int world_rank) {
  const int t = static_cast<int>(plan.tp), d = static_cast<int>(plan.dp);
  return {world_rank % t, (world_rank / t) % d, world_rank / (t * d)};
}

Status check_runtime_support(const Plan& p) {
  auto no = [](const std::string& what) { return Error{"the CPU runtime does not execute " + what + " yet"}; };
  // MPI guarantees tags up to 32767; pipeline transfers use one per (direction, micro-batch, stage).
  if (p.pp > 1 && 2 * p.micro_batches() * p.pp * p.virtual_stages > 32767)
    return Error{"too many micro-batches x stages for MPI tags (at most 32767 transfers per step)"};
  if (p.offload) return no("offload");
  return Status::Ok();
}

int synthetic_token(uint64_t data_seed, int64_t step, int64_t seq, int64_t pos, int64_t vocab) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(data_seed) ^ static_cast<uint64_t>(step)) ^
                                static_cast<uint64_t>(seq)) ^
                     static_cast<uint64_t>(pos);
  return static_cast<int>(splitmix64(h) % static_cast<uint64_t>(vocab));
}

Result<std::unique_ptr<Trainer>> Trainer::create(const ModelSpec& m, const Plan& plan, Communicator& world,
                                                 const TrainOptions& options) {
  if (Status s = check_runtime_support(plan); !s.ok()) return Error{s.error()};
  if (world.size() != plan.gpus())
    return Error{"world size " + std::to_string(world.size()) + " does not equal tp x pp x dp = " +
                 std::to_string(plan.gpus())};
  const RankCoords rc = rank_coords(plan, world.rank());
  Result<Transformer> model = Transformer::create(m, static_cast<int>(plan.tp), rc.tp, options.seed,
                                                  static_cast<int>(plan.pp), rc.pp, static_cast<int>(plan.virtual_stages));
  if (!model.ok()) return Error{model.error()};
  model->set_recompute(plan.recompute);
  model->set_sequence_parallel(plan.sequence_parallel);
  std::unique_ptr<Trainer> t(new Trainer(m, plan, options, std::move(model).value()));
  t->coords_ = rc;
  if (plan.precision == Precision::kFp16) t->scaler_.scale = LossScaler::kInitial;
  Communicator* w = &world;
  t->world_barrier_ = [w] { w->barrier(); };
  const int tp = static_cast<int>(plan.tp), dp = static_cast<int>(plan.dp);
  t->tp_ = world.split(world.rank() / tp, rc.tp);
  t->dp_ = world.split(rc.pp * tp + rc.tp, rc.dp);
  t->pp_ = world.split(rc.dp * tp + rc.tp, rc.pp);
  // Tied embeddings on several stages: the first and last stage all-reduce the gradient of their
  // two copies; every other rank sits alone in its own group.
  const bool ends = rc.pp == 0 || rc.pp == plan.pp - 1;
  t->embedding_ = world.split(ends ? rc.dp * tp + rc.tp : dp * tp + world.rank(), rc.pp);
  if (plan.zero >= 1) {
    Trainer* self = t.get();
    t->zero_ = std::make_unique<DistributedOptimizer>(t->model_.params(), *t->dp_,
                                                      [self](const Param* p) { return self->counted(p); });
    if (plan.zero == 3) {
      t->zero_->set_keep_parameters(false);
      t->zero_->release_parameters();
    }
    return t;
  }
  for (Param* p : t->model_.params()) {
    t->adam_m_.emplace_back(p->value.size(), 0.0f);
    t->adam_v_.emplace_back(p->value.size(), 0.0f);
  }
  return t;
}

std::string OpRecord::name() const {
  const std::string mb = "mb=" + std::to_string(micro_batch), ch = " chunk=" + std::to_string(chunk);
  switch (kind) {
    case kForward: return "F " + mb + ch;
    case kBackward: return "B " + mb + ch;
    case kRecv: return "recv pp " + mb;
    case kDpAllReduce: return "allreduce dp bucket=0";
    case kDpReduceScatter: return "reduce-scatter dp bucket=0";
    case kOptimizer: return "optimizer";
  }
  return "?";
}

const char* OpRecord::stream() const {
  return kind == kRecv ? "pp-recv" : (kind == kDpAllReduce || kind == kDpReduceScatter) ? "dp" : "compute";
}

void Trainer::record(OpRecord::Kind kind, int mb, int chunk, std::chrono::steady_clock::time_point begin) {
  const auto now = std::chrono::steady_clock::now();
  records_.push_back({kind, mb, chunk, std::chrono::duration<double>(begin - step_start_).count(),
                      std::chrono::duration<double>(now - begin).count()});
}

Result<std::vector<int>> read_token_file(const std::string& path, int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open file"};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int> tokens;
  std::istringstream ids(text);
  int64_t id = 0;
  while (ids >> id) tokens.push_back(static_cast<int>(id));
  const bool numeric = ids.eof() && !tokens.empty();
  if (!numeric) tokens.assign(text.begin(), text.end()), std::for_each(tokens.begin(), tokens.end(), [](int& t) { t &= 0xff; });
  for (int t : tokens)
    if (t < 0 || t >= vocab) return Error{path + ": token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab)};
  if (tokens.size() < 2) return Error{path + ": needs at least 2 tokens"};
  return tokens;
}

void sequence_tokens(const TrainOptions& options, int64_t vocab, int64_t global_batch, int64_t seq_len, int64_t step,
                     int64_t seq, int* inputs, int* targets) {
  const std::vector<int>& data = options.data;
  if (!data.empty()) {  // consecutive windows of the file, wrapping around: the same for every plan
    const int64_t span = static_cast<int64_t>(data.size()) - 1;
    const int64_t start = ((step * global_batch + seq) * seq_len) % span;
    for (int64_t pos = 0; pos < seq_len; ++pos) {
      inputs[pos] = data[(start + pos) % span];
      targets[pos] = data[(start + pos) % span + 1];
    }
    return;
  }
  for (int64_t pos = 0; pos < seq_len; ++pos) {
    inputs[pos] = synthetic_token(options.data_seed, step, seq, pos, vocab);
    targets[pos] = synthetic_token(options.data_seed, step, seq, pos + 1, vocab);
  }
}

void Trainer::fill_batch(int64_t step_index, int64_t mb, std::vector<int>& inputs, std::vector<int>& targets) const {
  const int64_t b = plan_.micro_batch, s = plan_.seq_len, per_rank = plan_.global_batch / plan_.dp;
  for (int64_t i = 0; i < b; ++i)
    sequence_tokens(options_, m_.vocab, plan_.global_batch, s, step_index, coords_.dp * per_rank + mb * b + i,
                    inputs.data() + i * s, targets.data() + i * s);
}

int Trainer::tag(OpKind kind, int64_t mb, int64_t receiver_vs) const {
  return static_cast<int>(((kind == OpKind::kForward ? 0 : 1) * plan_.micro_batches() + mb) * plan_.pp *
                              plan_.virtual_stages + receiver_vs);
}

// Runs this stage's schedule: F receives its input from the previous virtual stage (or reads
// tokens) and sends its output on; B receives the output gradient from the next virtual stage and
// sends the input gradient back. Returns the summed token loss of the last stage's micro-batches.
double Trainer::run_micro_batches(int64_t step_index) {
  const int b = static_cast<int>(plan_.micro_batch), s = static_cast<int>(plan_.seq_len);
  const int64_t p = plan_.pp, v = plan_.virtual_stages;
  const int64_t n = static_cast<int64_t>(model_.local_tokens(b * s)) * m_.hidden;  // a boundary tensor
  const float weight = scaler_.scale / static_cast<float>(plan_.global_batch * plan_.seq_len);
  std::vector<int> inputs(static_cast<size_t>(b) * s), targets(inputs.size());
  std::map<int64_t, Transformer::MicroBatch> states;  // by mb * v + chunk
  Buffer in(n), out(n);
  double loss = 0;
  const std::vector<std::vector<PipelineOp>> schedule = pipeline_ops(plan_.schedule, p, plan_.micro_batches(), v);
  for (const PipelineOp& op : schedule[coords_.pp]) {
    const int64_t vs = op.chunk * p + coords_.pp;
    Transformer::MicroBatch& state = states[op.micro_batch * v + op.chunk];
    if (plan_.zero == 3 && op.kind != OpKind::kWeight) zero_->gather_parameters();  // released after the op
    if (op.kind == OpKind::kForward) {
      fill_batch(step_index, op.micro_batch, inputs, targets);
      auto begin = std::chrono::steady_clock::now();
      if (vs > 0) pp_->recv(in.data(), n, static_cast<int>((vs - 1) % p), tag(op.kind, op.micro_batch, vs));
      if (vs > 0) record(OpRecord::kRecv, op.micro_batch, op.chunk, begin);
      begin = std::chrono::steady_clock::now();
      loss += model_.forward(op.chunk, inputs.data(), targets.data(), in.data(), out.data(), b, s, weight, *tp_, state);
      record(OpRecord::kForward, op.micro_batch, op.chunk, begin);
      if (vs < p * v - 1) pp_->send_async(out.data(), n, static_cast<int>((vs + 1) % p), tag(op.kind, op.micro_batch, vs + 1));
      if (plan_.zero == 3) zero_->release_parameters();
    } else if (op.kind == OpKind::kBackward) {
      auto begin = std::chrono::steady_clock::now();
      if (vs < p * v - 1) pp_->recv(in.data(), n, static_cast<int>((vs + 1) % p), tag(op.kind, op.micro_batch, vs));
      if (vs < p * v - 1) record(OpRecord::kRecv, op.micro_batch, op.chunk, begin);
      begin = std::chrono::steady_clock::now();
      model_.backward(op.chunk, in.data(), out.data(), b, s, *tp_, state);
      record(OpRecord::kBackward, op.micro_batch, op.chunk, begin);
      states.erase(op.micro_batch * v + op.chunk);
      begin = std::chrono::steady_clock::now();
      if (plan_.zero >= 2) zero_->reduce_gradients();  // ZeRO-2/3: shard every micro-batch's gradients
      if (plan_.zero >= 2) record(OpRecord::kDpReduceScatter, op.micro_batch, op.chunk, begin);
      if (vs > 0) pp_->send_async(out.data(), n, static_cast<int>((vs - 1) % p), tag(op.kind, op.micro_batch, vs - 1));
      if (plan_.zero == 3) zero_->release_parameters();
    }
  }
  pp_->wait_sends();
  return loss;
}

void Trainer::sync_tied_embedding() {
  Param* copy = model_.tied_head_copy();
  Param* wte = model_.embedding();
  Param* mine = copy ? copy : (plan_.pp > 1 && m_.tied_embeddings ? wte : nullptr);
  if (mine) embedding_->all_reduce(mine->grad.data(), static_cast<int64_t>(mine->grad.size()), ReduceOp::kSum);
}

// A parameter replicated over TP (and the last stage's copy of a tied embedding) enters the
// global gradient norm once.
bool Trainer::counted(const Param* p) {
  return !(p->tp_replicated && coords_.tp != 0) && p != model_.tied_head_copy();
}

// Global gradient norm over all ranks, from full gradients (ZeRO 0) or this rank's shard.
double Trainer::gradient_norm() {
  double local = 0;
  if (zero_) {
    local = zero_->shard_sumsq();
  } else {
    for (Param* p : model_.params())
      if (counted(p))
        for (float g : p->grad) local += static_cast<double>(g) * g;
  }
  float sumsq = static_cast<float>(local);
  tp_->all_reduce(&sumsq, 1, ReduceOp::kSum);
  pp_->all_reduce(&sumsq, 1, ReduceOp::kSum);
  if (zero_) dp_->all_reduce(&sumsq, 1, ReduceOp::kSum);
  return std::sqrt(static_cast<double>(sumsq));
}

void LossScaler::update(bool overflow) {
  if (scale == 1.0f && clean_steps == 0 && !overflow) return;  // not scaling
  if (overflow) {
    scale *= kBackoff;
    clean_steps = 0;
  } else if (++clean_steps % kGrowthInterval == 0) {
    scale *= kGrowth;
  }
}

void Trainer::reduce_gradients(std::vector<Param*>& params, int64_t step_index) {
  if (model_.sequence_parallel())  // norms saw only this rank's tokens
    for (Param* p : params)
      if (p->sp_partial) tp_->all_reduce(p->grad.data(), static_cast<int64_t>(p->grad.size()), ReduceOp::kSum);
  const bool poison = step_index == options_.inject_overflow_step && coords_.tp == 0 && coords_.dp == 0 && coords_.pp == 0;
  if (poison && plan_.zero < 2) params[0]->grad[0] = std::numeric_limits<float>::infinity();
  if (poison && plan_.zero >= 2) zero_->poison_gradient();
  sync_tied_embedding();
  if (plan_.zero == 1) zero_->reduce_gradients();
  if (plan_.zero == 0)
    for (Param* p : params) dp_->all_reduce(p->grad.data(), static_cast<int64_t>(p->grad.size()), ReduceOp::kSum);
}

StepStats Trainer::step(int64_t step_index) {
  std::vector<Param*> params = model_.params();
  for (Param* p : params) std::fill(p->grad.begin(), p->grad.end(), 0.0f);
  world_barrier_();
  records_.clear();
  step_start_ = std::chrono::steady_clock::now();
  float loss = static_cast<float>(run_micro_batches(step_index));
  auto begin = std::chrono::steady_clock::now();
  reduce_gradients(params, step_index);
  if (plan_.dp > 1 && plan_.zero < 2)
    record(plan_.zero == 0 ? OpRecord::kDpAllReduce : OpRecord::kDpReduceScatter, -1, -1, begin);
  pp_->all_reduce(&loss, 1, ReduceOp::kSum);  // only the last stage holds losses
  dp_->all_reduce(&loss, 1, ReduceOp::kSum);
  begin = std::chrono::steady_clock::now();
  StepStats stats;
  stats.loss = loss / static_cast<double>(plan_.global_batch * plan_.seq_len);
  // The norm is summed over every rank, so an inf or NaN anywhere reaches every rank alike.
  const float used_scale = scaler_.scale;  // the gradients were computed for loss x used_scale
  const double scaled_norm = gradient_norm();
  stats.grad_norm = scaled_norm / used_scale;
  stats.skipped = !std::isfinite(scaled_norm) || step_index == options_.skip_step;
  if (step_index != options_.skip_step) scaler_.update(!std::isfinite(scaled_norm));
  stats.loss_scale = scaler_.scale;
  if (stats.skipped) {
    if (zero_) zero_->discard_gradients();
    record(OpRecord::kOptimizer, -1, -1, begin);
    return stats;
  }
  const float clip = stats.grad_norm > options_.clip_norm ? static_cast<float>(options_.clip_norm / (stats.grad_norm + 1e-6)) : 1.0f;
  const float scale = clip / used_scale;
  ++updates_;
  if (zero_) {
    zero_->step(options_.adam, static_cast<int>(updates_), scale);
  } else {
    for (size_t i = 0; i < params.size(); ++i)
      kernels::adamw_update(params[i]->value.data(), params[i]->grad.data(), adam_m_[i].data(), adam_v_[i].data(),
                            static_cast<long>(params[i]->value.size()), options_.adam, static_cast<int>(updates_), scale);
  }
  record(OpRecord::kOptimizer, -1, -1, begin);
  return stats;
}

}  // namespace parallax

namespace parallax {

namespace {
constexpr uint64_t kStateMagic = 0x5041524158535431ULL;  // "PARAXST1"

std::vector<Buffer*> state_buffers(Transformer& model, std::vector<Buffer>& m, std::vector<Buffer>& v,
                                   DistributedOptimizer* zero) {
  std::vector<Buffer*> out;
  if (zero) {
    out = zero->state();
  } else {
    for (Param* p : model.params()) out.push_back(&p->value);
    for (Buffer& b : m) out.push_back(&b);
    for (Buffer& b : v) out.push_back(&b);
  }
  return out;
}
}  // namespace

std::string Trainer::save_state() {
  std::string out;
  auto put = [&](const void* data, size_t bytes) { out.append(static_cast<const char*>(data), bytes); };
  put(&kStateMagic, sizeof kStateMagic);
  put(&updates_, sizeof updates_);
  put(&scaler_.scale, sizeof scaler_.scale);
  put(&scaler_.clean_steps, sizeof scaler_.clean_steps);
  for (Buffer* b : state_buffers(model_, adam_m_, adam_v_, zero_.get())) {
    const uint64_t n = b->size();
    put(&n, sizeof n);
    put(b->data(), n * sizeof(float));
  }
  return out;
}

Status Trainer::load_state(const std::string& bytes) {
  size_t at = 0;
  auto take = [&](void* data, size_t n) {
    if (at + n > bytes.size()) return false;
    std::memcpy(data, bytes.data() + at, n);
    at += n;
    return true;
  };
  uint64_t magic = 0;
  int64_t updates = 0;
  LossScaler scaler;
  if (!take(&magic, sizeof magic) || magic != kStateMagic || !take(&updates, sizeof updates) ||
      !take(&scaler.scale, sizeof scaler.scale) || !take(&scaler.clean_steps, sizeof scaler.clean_steps))
    return Error{"not a Parallax training state"};
  for (Buffer* b : state_buffers(model_, adam_m_, adam_v_, zero_.get())) {
    uint64_t n = 0;
    if (!take(&n, sizeof n) || n != b->size()) return Error{"state does not match this model and plan"};
    if (!take(b->data(), n * sizeof(float))) return Error{"state is truncated"};
  }
  if (at != bytes.size()) return Error{"state has trailing bytes"};
  updates_ = updates;
  scaler_ = scaler;
  if (zero_ && plan_.zero < 3) zero_->gather_parameters();  // parameters follow the master shards
  return Status::Ok();
}

}  // namespace parallax
