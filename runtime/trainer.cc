#include "runtime/trainer.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <sstream>
#include <map>

#include "runtime/init.h"
#include "runtime/transformer_cache.h"

namespace parallax {

int synthetic_token(uint64_t data_seed, int64_t step, int64_t seq, int64_t pos, int64_t vocab) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(data_seed) ^ static_cast<uint64_t>(step)) ^
                                static_cast<uint64_t>(seq)) ^
                     static_cast<uint64_t>(pos);
  return static_cast<int>(splitmix64(h) % static_cast<uint64_t>(vocab));
}

Result<std::unique_ptr<Trainer>> Trainer::create(const ModelSpec& m, const Plan& plan, Communicator& world,
                                                 const TrainOptions& options) {
  if (Status s = check_runtime_support(m, plan); !s.ok()) return Error{s.error()};
  if (world.size() != plan.gpus())
    return Error{"world size " + std::to_string(world.size()) + " does not equal tp x cp x pp x dp = " +
                 std::to_string(plan.gpus()) + " (start it as mpirun -np " + std::to_string(plan.gpus()) + " train ...)"};
  const RankGrid grid(plan);
  const RankCoords rc = grid.coords(world.rank());
  Result<Transformer> model = Transformer::create(m, static_cast<int>(plan.tp), rc.tp, options.seed,
                                                  static_cast<int>(plan.pp), rc.pp, static_cast<int>(plan.virtual_stages),
                                                  plan.uneven_chunk_layers(m.layers, rc.pp),
                                                  static_cast<int>(plan.ep), grid.group(GroupKind::kEp, world.rank()).key);
  if (!model.ok()) return Error{model.error()};
  model->set_recompute(plan.recompute, plan.execution.recompute_fraction);
  model->set_sequence_parallel(plan.sequence_parallel);
  model->set_fp8(plan.precision == Precision::kFp8);
  model->set_split_weight_gradients(splits_weight_gradients(plan.schedule));
  std::unique_ptr<Trainer> t(new Trainer(m, plan, options, std::move(model).value()));
  t->coords_ = rc;
  if (plan.precision == Precision::kFp16) t->scaler_.scale = LossScaler::kInitial;
  Communicator* w = &world;
  t->world_barrier_ = [w] { w->barrier(); };
  auto split = [&](GroupKind kind) {
    const GroupMembership g = grid.group(kind, world.rank());
    return world.split(g.color >= 0 ? g.color : grid.size() + world.rank(), g.key);  // -1: a group of one
  };
  t->tp_ = std::make_unique<TimedCommunicator>(split(GroupKind::kTp));
  t->dp_ = split(GroupKind::kDp);
  t->pp_ = split(GroupKind::kPp);
  t->embedding_ = split(GroupKind::kEmbedding);
  t->cp_ = split(GroupKind::kCp);
  t->ep_ = split(GroupKind::kEp);
  t->expert_dp_ = split(GroupKind::kExpertDp);
  t->model_.set_expert_communicator(t->ep_.get());
  t->model_.set_context_parallel(static_cast<int>(plan.cp), rc.cp, static_cast<int>(plan.seq_len), t->cp_.get(),
                                 plan.execution.cp_comm == CpComm::kP2p);
  std::vector<std::vector<Param*>> chunks;
  for (int c = 0; c < t->model_.chunks(); ++c) {  // EP: the experts reduce over their own ranks instead
    std::vector<Param*> dense;
    for (Param* p : t->model_.chunk_params(c))
      if (!p->expert) dense.push_back(p);
    chunks.push_back(std::move(dense));
  }
  t->layout_ = std::make_unique<FlatLayout>(std::move(chunks), dp_buckets_per_chunk(m, plan, rc.pp));
  const int64_t boundary =
      static_cast<int64_t>(t->model_.local_tokens(static_cast<int>(plan.micro_batch * plan.seq_len / plan.cp))) * m.hidden;
  t->in_.assign(boundary, 0.0f), t->out_.assign(boundary, 0.0f);
  t->create_optimizers(plan);
  return t;
}

// ZeRO over one data rank shards nothing, and the step program has no DP collectives to drive
// it: the rank keeps whole optimizer states, as ZeRO 0 does. With EP, ZeRO shards the experts
// over their own data-parallel ranks, one bucket per chunk. What no optimizer shards gets whole
// AdamW moments.
void Trainer::create_optimizers(const Plan& plan) {
  auto counts = [this](const Param* p) { return counted(p); };
  auto decay = [d = options_.decay_norms_and_biases](const Param* p) { return decays(p->role, d); };
  if (plan.zero_shards()) zero_ = std::make_unique<DistributedOptimizer>(*layout_, *dp_, counts, decay);
  if (plan.zero >= 1 && plan.ep > 1 && plan.expert_data_ranks() > 1) {
    std::vector<std::vector<Param*>> chunks;
    for (int c = 0; c < model_.chunks(); ++c) {
      chunks.emplace_back();
      for (Param* p : model_.chunk_params(c))
        if (p->expert) chunks.back().push_back(p);
    }
    expert_layout_ = std::make_unique<FlatLayout>(std::move(chunks), 1);
    expert_zero_ = std::make_unique<DistributedOptimizer>(*expert_layout_, *expert_dp_, counts, decay);
  }
  if (plan.zero == 3) release_parameters();
  for (Param* p : model_.params()) {
    const bool whole = !sharded(p);
    adam_m_.emplace_back(whole ? p->size : 0, 0.0f);
    adam_v_.emplace_back(whole ? p->size : 0, 0.0f);
  }
}

// The embedding (first stage) or its copy (last stage) when a pipeline ties them, else null.
Param* Trainer::tied_embedding() {
  if (!m_.tied_embeddings || plan_.pp < 2) return nullptr;
  return model_.tied_head_copy() ? model_.tied_head_copy() : model_.embedding();
}

// The DP buckets of `chunk`: the layout holds the same number of each chunk, chunk after chunk.
std::vector<int64_t> Trainer::chunk_buckets(int64_t chunk) const {
  const int64_t per = layout_->buckets() / model_.chunks();
  std::vector<int64_t> out;
  for (int64_t b = chunk * per; b < (chunk + 1) * per; ++b) out.push_back(b);
  return out;
}

// ZeRO-3 keeps only shards between passes: the dense weights' and, with EP, the experts'.
void Trainer::release_parameters() {
  if (zero_) zero_->release_parameters();
  if (expert_zero_) expert_zero_->release_parameters();
}

bool Trainer::per_pass_shards() const { return zero_ && plan_.zero >= 2; }

bool Trainer::sharded(const Param* p) const { return p->expert ? expert_zero_ != nullptr : zero_ != nullptr; }

std::string record_name(const StageProgram& stage, const OpRecord& r) {
  const ProgramOp& op = stage.ops[r.op];
  return r.tp ? tp_event_name(op) : op_name(op);
}

StreamKind record_stream(const StageProgram& stage, const OpRecord& r) {
  return r.tp ? StreamKind::kTp : stage.ops[r.op].stream;
}

Result<std::vector<int>> read_token_file(const std::string& path, int64_t vocab) {
  std::error_code ec;  // reading a directory throws inside the stream library
  if (std::filesystem::is_directory(path, ec)) return Error{path + ": is a directory, not a training file"};
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
  std::vector<int> in(s), out(s);
  const std::vector<int>& positions = model_.context_positions();  // CP: this rank's tokens only
  const int64_t local = positions.empty() ? s : static_cast<int64_t>(positions.size());
  for (int64_t i = 0; i < b; ++i) {
    sequence_tokens(options_, m_.vocab, plan_.global_batch, s, step_index, coords_.dp * per_rank + mb * b + i, in.data(),
                    out.data());
    for (int64_t k = 0; k < local; ++k) {
      const int64_t pos = positions.empty() ? k : positions[k];
      inputs[i * local + k] = in[pos], targets[i * local + k] = out[pos];
    }
  }
}

int Trainer::tag(OpKind kind, int64_t mb, int64_t receiver_vs) const {
  return static_cast<int>(((kind == OpKind::kForward ? 0 : 1) * plan_.micro_batches() + mb) * plan_.pp *
                              plan_.virtual_stages + receiver_vs);
}

// F reads tokens (first virtual stage) or in_, writes out_ (or, last, the loss); B reads the output
// gradient from in_ and writes the input gradient to out_; W (ZB-H1) accumulates the parameter
// gradients B left in the micro-batch's state. The state goes with the op that releases the
// activations (B, or W). ZeRO-3 parameters were gathered by the op before and are released after
// (W reads none, and none is gathered for it).
void Trainer::compute(const ProgramOp& op) {
  const int64_t step_index = step_index_;
  const int b = static_cast<int>(plan_.micro_batch), s = static_cast<int>(plan_.seq_len / plan_.cp);  // CP: local tokens
  const int64_t key = op.micro_batch * plan_.virtual_stages + op.chunk;
  if (op.pass == OpKind::kForward) {
    std::vector<int> inputs(static_cast<size_t>(b) * s), targets(inputs.size());
    fill_batch(step_index, op.micro_batch, inputs, targets);
    const float weight = scaler_.scale / static_cast<float>(plan_.global_batch * plan_.seq_len);
    loss_ += model_.forward(op.chunk, inputs.data(), targets.data(), in_.data(), out_.data(), b, s, weight, *tp_,
                            states_[key]);
  } else if (op.pass == OpKind::kBackward) {
    model_.backward(op.chunk, in_.data(), out_.data(), b, s, *tp_, states_[key]);
    // The overflow test hook: an inf in one rank's gradients before any reduction, which carries it
    // to every rank of its DP group (the norm's sums over TP and PP do the rest).
    if (step_index == options_.inject_overflow_step && coords_ == RankCoords{})
      model_.chunk_params(op.chunk).front()->grad[0] = std::numeric_limits<float>::infinity();
  } else {
    model_.weight_backward(op.chunk, b, s, states_[key]);
  }
  if (releases_activations(op.pass, plan_.schedule)) states_.erase(key);
  if (plan_.zero == 3 && op.pass != OpKind::kWeight) release_parameters();
}

void Trainer::collective(const ProgramOp& op) {
  switch (op.role) {
    case CollectiveRole::kGradientBucket:
      if (zero_) {
        zero_->reduce_bucket(op.bucket);
      } else {
        const ElementRange r = layout_->bucket(op.bucket);
        Buffer flat(r.end - r.begin);
        layout_->copy_grads(r, flat.data());
        dp_->all_reduce(flat.data(), static_cast<int64_t>(flat.size()), ReduceOp::kSum);
        layout_->set_grads(r, flat.data());
      }
      return;
    case CollectiveRole::kGradientShard:
      if (Param* tied = tied_embedding()) {  // kept aside for the embedding all-reduce at the end
        tied_grad_.resize(tied->grad.size(), 0.0f);
        for (size_t i = 0; i < tied_grad_.size(); ++i) tied_grad_[i] += tied->grad[i], tied->grad[i] = 0.0f;
      }
      for (int64_t b : chunk_buckets(op.chunk)) zero_->reduce_bucket(b);  // only this chunk's have gradients
      return;
    case CollectiveRole::kWeightBucket: zero_->gather_bucket(op.bucket); return;
    case CollectiveRole::kWeightGather:
      for (int64_t b : chunk_buckets(op.chunk)) zero_->gather_bucket(b);
      return;
    case CollectiveRole::kNormGradients:
      for (Param* p : model_.chunk_params(op.chunk))
        if (p->sp_partial) tp_->all_reduce(p->grad.data(), static_cast<int64_t>(p->grad.size()), ReduceOp::kSum);
      return;
    case CollectiveRole::kEmbedding: {
      Param* tied = tied_embedding();
      if (!tied) return;
      if (!per_pass_shards()) {
        embedding_->all_reduce(tied->grad.data(), static_cast<int64_t>(tied->grad.size()), ReduceOp::kSum);
        return;
      }
      // ZeRO-2/3: every other gradient is in the shards already, so reducing all buckets once more
      // moves just the summed embedding gradient there.
      tied_grad_.resize(tied->grad.size(), 0.0f);
      embedding_->all_reduce(tied_grad_.data(), static_cast<int64_t>(tied_grad_.size()), ReduceOp::kSum);
      std::copy(tied_grad_.begin(), tied_grad_.end(), tied->grad.begin());
      std::fill(tied_grad_.begin(), tied_grad_.end(), 0.0f);
      zero_->reduce_gradients();
      return;
    }
    case CollectiveRole::kExpertGradients:  // over the expert data-parallel ranks: reduce-scattered, or all-reduced
      if (expert_zero_ && op.micro_batch >= 0) return expert_zero_->reduce_bucket(op.chunk);  // ZeRO-2/3: each pass's
      if (expert_zero_) return expert_zero_->reduce_bucket(op.chunk);
      for (Param* p : model_.chunk_params(op.chunk))
        if (p->expert) expert_dp_->all_reduce(p->grad.data(), static_cast<int64_t>(p->grad.size()), ReduceOp::kSum);
      return;
    case CollectiveRole::kExpertWeights:  // ZeRO-3: the pass's chunk (one bucket each); ZeRO-1/2: all, after the step
      if (op.micro_batch >= 0) return expert_zero_->gather_bucket(op.chunk);
      return expert_zero_->gather_parameters();
    case CollectiveRole::kReplicaReduce:  // hybrid sharding is refused by check_runtime_support
    case CollectiveRole::kNone: return;
  }
}

void Trainer::send(const ProgramOp& op) {
  const int64_t receiver = send_target(plan_, op.pass, op.chunk, coords_.pp);
  pp_->send_async(out_.data(), static_cast<int64_t>(out_.size()), op.peer, tag(op.pass, op.micro_batch, receiver));
}

void Trainer::recv(const ProgramOp& op) {
  const int64_t receiver = virtual_stage(coords_.pp, op.chunk, plan_.pp);
  pp_->recv(in_.data(), static_cast<int64_t>(in_.size()), op.peer, tag(op.pass, op.micro_batch, receiver));
}

// A parameter replicated over TP (and the last stage's copy of a tied embedding) enters the
// global gradient norm once.
bool Trainer::counted(const Param* p) {
  return !(p->tp_replicated && coords_.tp != 0) && p != model_.tied_head_copy();
}

// The sum of squares of the gradients over all ranks, from full gradients (ZeRO 0) or this rank's
// shards; an inf or NaN anywhere reaches every rank alike. Dense weights: the same on every data
// rank, or sharded over them. Experts: different on each EP rank, the same (or sharded) over the
// expert data-parallel ranks.
double Trainer::gradient_sumsq() {
  double dense = 0, experts = 0;
  for (Param* p : model_.params())
    if (counted(p) && !sharded(p))
      for (float g : p->grad) (p->expert ? experts : dense) += static_cast<double>(g) * g;
  float dense_sumsq = static_cast<float>(dense), expert_sumsq = static_cast<float>(experts);
  if (zero_) {
    dense_sumsq = static_cast<float>(zero_->shard_sumsq());
    dp_->all_reduce(&dense_sumsq, 1, ReduceOp::kSum);
  }
  if (expert_zero_) {
    expert_sumsq = static_cast<float>(expert_zero_->shard_sumsq());
    expert_dp_->all_reduce(&expert_sumsq, 1, ReduceOp::kSum);
  }
  ep_->all_reduce(&expert_sumsq, 1, ReduceOp::kSum);
  float sumsq = dense_sumsq + expert_sumsq;
  tp_->all_reduce(&sumsq, 1, ReduceOp::kSum);
  pp_->all_reduce(&sumsq, 1, ReduceOp::kSum);
  return sumsq;
}

double Trainer::loss_sum() {
  pp_->wait_sends();  // the step's last transfers complete before its end
  float loss = static_cast<float>(loss_);
  pp_->all_reduce(&loss, 1, ReduceOp::kSum);  // only the last stage holds losses
  dp_->all_reduce(&loss, 1, ReduceOp::kSum);
  return loss;
}

void Trainer::discard_gradients() {  // whole gradients: the next step zeroes them
  if (zero_) zero_->discard_gradients();
  if (expert_zero_) expert_zero_->discard_gradients();
}

void Trainer::apply_update(float grad_scale, int update) {
  if (zero_) zero_->step(options_.adam, update, grad_scale);
  if (expert_zero_) expert_zero_->step(options_.adam, update, grad_scale);
  std::vector<Param*> params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (sharded(params[i])) continue;
    kernels::AdamWConfig cfg = options_.adam;
    if (!decays(params[i]->role, options_.decay_norms_and_biases)) cfg.weight_decay = 0;
    kernels::adamw_update(params[i]->value.data(), params[i]->grad.data(), adam_m_[i].data(), adam_v_[i].data(),
                          static_cast<long>(params[i]->value.size()), cfg, update, grad_scale);
  }
}

void Trainer::op_begin(size_t, const ProgramOp&) { op_start_ = std::chrono::steady_clock::now(); }

// Each op under its program index, and the TP collectives inside a compute op as their own record.
void Trainer::op_end(size_t index, const ProgramOp& op) {
  auto since = [this](std::chrono::steady_clock::time_point t) { return std::chrono::duration<double>(t - step_start_).count(); };
  const auto end = std::chrono::steady_clock::now();
  records_.push_back({static_cast<int32_t>(index), false, since(op_start_), since(end) - since(op_start_)});
  const double tp = tp_->take_seconds();
  if (op.type == ProgramOpType::kCompute && op.bytes > 0) records_.push_back({static_cast<int32_t>(index), true, since(end) - tp, tp});
}

StepStats Trainer::step(int64_t step_index) {
  for (Param* p : model_.params()) std::fill(p->grad.begin(), p->grad.end(), 0.0f);
  world_barrier_();
  records_.clear();
  loss_ = 0;
  step_index_ = step_index;
  tp_->take_seconds();
  step_start_ = std::chrono::steady_clock::now();
  const StepSettings settings{options_.clip_norm, step_index == options_.skip_step,
                              static_cast<double>(plan_.global_batch * plan_.seq_len)};
  return execute_step(program_.stages[coords_.pp], *this, scaler_, updates_, settings);
}

}  // namespace parallax

namespace parallax {

// One replica of each parameter: DP and CP rank 0 (expert-DP rank 0 for an expert), TP rank 0 of
// a tensor every TP rank holds whole.
bool Trainer::owns(const Param* p) const {
  if (p->tp_replicated && coords_.tp != 0) return false;
  if (p->expert) return expert_dp_->rank() == 0;
  return coords_.dp == 0 && coords_.cp == 0;
}

std::vector<TensorShard> Trainer::export_state() {
  const std::vector<Param*> params = model_.params();
  // Each sharded parameter's whole state, gathered from its optimizer's pieces.
  std::map<const Param*, std::array<Buffer, 3>> gathered;
  for (auto [layout, opt] : {std::pair{layout_.get(), zero_.get()}, std::pair{expert_layout_.get(), expert_zero_.get()}}) {
    if (!opt) continue;
    DistributedOptimizer::ParamState s = opt->gather_state();
    for (size_t i = 0; i < layout->params().size(); ++i)
      gathered[layout->params()[i]] = {std::move(s.value[i]), std::move(s.m[i]), std::move(s.v[i])};
  }
  std::vector<TensorShard> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param* p = params[i];
    if (!owns(p)) continue;
    TensorShard s{p->name, p->shape, p->pieces, {}, {}, {}};
    if (const auto it = gathered.find(p); it != gathered.end()) {
      s.value = std::move(it->second[0]), s.exp_avg = std::move(it->second[1]), s.exp_avg_sq = std::move(it->second[2]);
    } else {
      s.value = p->value, s.exp_avg = adam_m_[i], s.exp_avg_sq = adam_v_[i];
    }
    out.push_back(std::move(s));
  }
  return out;
}

Status Trainer::import_state(const CheckpointTensors& tensors, int64_t updates, const LossScaler& scaler) {
  const std::vector<Param*> params = model_.params();
  std::vector<Buffer> value(params.size()), m(params.size()), v(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Param* p = params[i];
    auto it = tensors.find(p->name);
    if (it == tensors.end() && p == model_.tied_head_copy()) it = tensors.find("wte");  // resharded from one stage
    if (it == tensors.end()) return Error{"the checkpoint has no tensor " + p->name};
    if (it->second.shape != p->shape) return Error{"tensor " + p->name + " has another shape in the checkpoint"};
    for (auto [full, local] : {std::pair{&it->second.value, &value[i]}, std::pair{&it->second.exp_avg, &m[i]},
                               std::pair{&it->second.exp_avg_sq, &v[i]}}) {
      local->assign(p->size, 0.0f);
      take_pieces(full->data(), p->shape, p->pieces, local->data());
    }
  }
  std::map<const Param*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i]] = i;
  for (auto [layout, opt] : {std::pair{layout_.get(), zero_.get()}, std::pair{expert_layout_.get(), expert_zero_.get()}}) {
    if (!opt) continue;
    DistributedOptimizer::ParamState s;
    for (const Param* p : layout->params())
      s.value.push_back(value[index[p]]), s.m.push_back(m[index[p]]), s.v.push_back(v[index[p]]);
    opt->set_state(s);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value = std::move(value[i]);
    if (!sharded(params[i])) adam_m_[i] = std::move(m[i]), adam_v_[i] = std::move(v[i]);
  }
  if (plan_.zero == 3) release_parameters();
  updates_ = updates;
  scaler_ = scaler;
  return Status::Ok();
}

}  // namespace parallax
