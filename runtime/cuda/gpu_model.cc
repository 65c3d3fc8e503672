// GpuModel: parameter layout and initialization, the embedding and the loss head, and the
// forward / backward of a stage (the layers themselves are in gpu_layer.cc).
#include "runtime/cuda/gpu_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cast.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/reduce.h"
#include "runtime/checkpoint.h"
#include "runtime/cuda/gpu_model_cache.h"
#include "runtime/transformer.h"

namespace parallax {

namespace cu = kernels::cuda;

namespace {
constexpr float kInitStd = 0.02f;
}  // namespace

template <class T>
DType GpuModel<T>::dtype() const {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  else if constexpr (std::is_same_v<T, cu::bf16>) return DType::kBF16;
  else return DType::kF16;
}

// Each tensor starts at a multiple of 128 elements (256 bytes of bf16, 512 of fp32): cuBLASLt's
// heuristic assumes 256-byte aligned operands and the elementwise kernels take their vector path.
// The gaps hold zeros that AdamW leaves at zero.
template <class T>
void GpuModel<T>::add(const std::string& name, int64_t size, bool replicated, ParamRole role) {
  constexpr int64_t kAlign = 128;
  count_ = (count_ + kAlign - 1) / kAlign * kAlign;
  tensors_.push_back({name, count_, size, replicated, is_norm(role), role});
  count_ += size;
}

// The tensors of runtime/transformer.cc, in its params() order and with its names and sizes.
template <class T>
void GpuModel<T>::layout() {
  const int64_t h = m_.hidden, ql = q_local_, kvl = kv_local_, f1 = fc1_local_, fl = ffn_local_;
  const bool ln = m_.norm == Norm::kLayerNorm;
  auto index = [this] { return static_cast<int64_t>(tensors_.size()); };
  if (first_stage()) {
    wte_ = index(), add("wte", vocab_local_ * h, false, ParamRole::kEmbedding);
    if (m_.positions == Positions::kLearned) wpe_ = index(), add("wpe", m_.max_positions * h, true, ParamRole::kEmbedding);
  }
  if (last_stage()) {
    lnf_w_ = index(), add("lnf.w", h, true, ParamRole::kNormWeight);
    if (ln) lnf_b_ = index(), add("lnf.b", h, true, ParamRole::kNormBias);
    if (!m_.tied_embeddings || o_.pp > 1) head_ = index(), add(m_.tied_embeddings ? "wte.copy" : "head", vocab_local_ * h, false, ParamRole::kEmbedding);
  }
  for (int64_t l = 0; l < stage_layers_; ++l) {
    const std::string n = "layer" + std::to_string(first_layer_ + l) + ".";
    Layer L;
    const int64_t first = static_cast<int64_t>(tensors_.size());
    auto put = [&](int64_t& slot, const std::string& name, int64_t size, bool replicated, ParamRole role) {
      slot = index();
      add(n + name, size, replicated, role);
    };
    using enum ParamRole;
    put(L.ln1_w, "ln1.w", h, true, kNormWeight);
    if (ln) put(L.ln1_b, "ln1.b", h, true, kNormBias);
    put(L.qkv_w, "qkv.w", (ql + 2 * kvl) * h, false, kMatrix);
    if (m_.has_qkv_bias()) put(L.qkv_b, "qkv.b", ql + 2 * kvl, false, kBias);
    put(L.proj_w, "proj.w", h * ql, false, kMatrix);
    if (m_.has_o_bias()) put(L.proj_b, "proj.b", h, true, kBias);
    put(L.ln2_w, "ln2.w", h, true, kNormWeight);
    if (ln) put(L.ln2_b, "ln2.b", h, true, kNormBias);
    put(L.fc1_w, "fc1.w", f1 * h, false, kMatrix);
    if (m_.has_mlp_bias()) put(L.fc1_b, "fc1.b", f1, false, kBias);
    put(L.fc2_w, "fc2.w", h * fl, false, kMatrix);
    if (m_.has_mlp_bias()) put(L.fc2_b, "fc2.b", h, true, kBias);
    layers_.push_back(L);
    const int64_t begin = tensors_[first].offset;
    layer_ranges_.push_back({begin, count_ - begin});
  }
}

// Shard sizes and the tensor layout: no device needed.
template <class T>
Result<std::unique_ptr<GpuModel<T>>> GpuModel<T>::configure(const ModelSpec& m, const GpuModelOptions& o,
                                                            cudaStream_t stream) {
  const int64_t tp = o.tp;
  if (o.stage_layers.count == 0 && m.layers % o.pp != 0)
    return Error{"num_layers " + std::to_string(m.layers) + " is not divisible by pp"};
  std::unique_ptr<GpuModel> g(new GpuModel(m, o, stream));
  g->vocab_padded_ = padded_vocab(m);
  if (m.heads % tp || m.kv_heads % tp || m.ffn_hidden % tp || g->vocab_padded_ % tp)
    return Error{"tp " + std::to_string(tp) + " must divide the heads, KV heads, FFN size and padded vocabulary " +
                 std::to_string(g->vocab_padded_)};
  g->vocab_local_ = g->vocab_padded_ / tp;
  g->q_local_ = m.q_dim() / tp;
  g->kv_local_ = m.kv_dim() / tp;
  g->ffn_local_ = m.ffn_hidden / tp;
  g->fc1_local_ = (m.mlp == Mlp::kSwiGlu ? 2 : 1) * g->ffn_local_;
  g->stage_layers_ = o.stage_layers.count > 0 ? o.stage_layers.count : m.layers / o.pp;
  g->first_layer_ = o.stage_layers.count > 0 ? o.stage_layers.first : o.pp_rank * g->stage_layers_;
  g->layout();
  const int64_t multiple = 128 * static_cast<int64_t>(std::max(1, o.shards));
  g->count_ = (g->count_ + multiple - 1) / multiple * multiple;
  return g;
}

template <class T>
Result<std::vector<GpuTensor>> GpuModel<T>::tensor_layout(const ModelSpec& m, const GpuModelOptions& o) {
  Result<std::unique_ptr<GpuModel>> g = configure(m, o, nullptr);
  if (!g.ok()) return Error{g.error()};
  return (*g)->tensors_;
}

template <class T>
Result<std::unique_ptr<GpuModel<T>>> GpuModel<T>::create(const ModelSpec& m, const GpuModelOptions& o,
                                                         cudaStream_t stream) {
  Result<std::unique_ptr<GpuModel>> g = configure(m, o, stream);
  if (!g.ok()) return g;
  GpuModel& model = **g;
  model.master_ = DeviceArray<float>(model.count_);
  model.grad_ = DeviceArray<float>(model.count_);
  model.compute_ = DeviceArray<T>(model.count_);
  if (Status s = model.initialize(); !s.ok()) return Error{s.error()};
  return g;
}

template <class T>
GpuModel<T>::~GpuModel() = default;

// Exact: the CPU model's values, matched by name (a mismatch is a bug in layout()). Fast: matrices
// uniform with the CPU's standard deviation, norm weights 1, biases 0.
template <class T>
Status GpuModel<T>::initialize() {
  std::vector<float> host(static_cast<size_t>(count_), 0.0f);
  if (o_.exact_init) {
    Result<Transformer> cpu = Transformer::create(m_, o_.tp, o_.tp_rank, o_.seed, o_.pp, o_.pp_rank, 1,
                                                  o_.stage_layers.count > 0 ? std::vector{o_.stage_layers} : std::vector<Plan::LayerRange>{});
    if (!cpu.ok()) return Error{cpu.error()};
    std::vector<Param*> params = cpu->params();
    if (params.size() != tensors_.size()) return Error{"GPU parameter layout differs from the CPU model's"};
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i]->name != tensors_[i].name || params[i]->size != tensors_[i].size)
        return Error{"GPU parameter " + tensors_[i].name + " differs from the CPU model's " + params[i]->name};
      std::copy(params[i]->value.begin(), params[i]->value.end(), host.begin() + tensors_[i].offset);
    }
  } else {
    for (const GpuTensor& t : tensors_)
      if (t.role == ParamRole::kNormWeight)
        std::fill(host.begin() + t.offset, host.begin() + t.offset + t.size, 1.0f);
  }
  cu::check(cudaMemcpyAsync(master_.data(), host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice, stream_),
            "upload parameters");
  if (!o_.exact_init) {
    cu::set_stream(stream_);
    const float bound = kInitStd * std::sqrt(3.0f);  // uniform [-a, a) has std a / sqrt(3)
    for (const GpuTensor& t : tensors_) {
      const bool vector = t.role != ParamRole::kMatrix && t.role != ParamRole::kEmbedding;
      // Keyed by name, so the last stage's copy of a tied embedding starts equal to the embedding.
      const std::string key = t.name == "wte.copy" ? "wte" : t.name;
      if (!vector) cu::fill_uniform(master_.data() + t.offset, t.size, o_.seed ^ fnv1a64(key), bound);
    }
  }
  refresh_weights();
  cu::check(cudaStreamSynchronize(stream_), "initialize parameters");  // `host` dies here
  return Status::Ok();
}

template <class T>
void GpuModel<T>::refresh_weights() {
  cu::set_stream(stream_);
  cu::cast_from_float(compute_.data(), master_.data(), count_);
}

template <class T>
std::unique_ptr<typename GpuModel<T>::MicroBatch> GpuModel<T>::new_micro_batch() const {
  return std::make_unique<MicroBatch>();
}

template <class T>
void GpuModel<T>::embed_forward(T* x, const int* tokens, int n, int s, DeviceCommunicator& tp) {
  const int h = static_cast<int>(m_.hidden);
  DeviceArray<T> partial(static_cast<int64_t>(n) * h);
  cu::set_stream(stream_);
  cu::embedding_forward(partial.data(), tokens, w(wte_), wpe_ >= 0 ? w(wpe_) : nullptr, n, s, h,
                        static_cast<int>(o_.tp_rank * vocab_local_), static_cast<int>(vocab_local_), o_.tp_rank == 0);
  reduce_tokens(x, partial.data(), n, tp);  // vocab-parallel partial sums
}

template <class T>
void GpuModel<T>::embed_backward(const T* dx, const int* tokens, int n, int s, DeviceCommunicator& tp) {
  const int h = static_cast<int>(m_.hidden);
  DeviceArray<T> full(sequence_parallel() ? static_cast<int64_t>(n) * h : 0);
  const T* d = dx;
  if (sequence_parallel()) gather_tokens(full.data(), dx, n, tp), d = full.data();
  cu::set_stream(stream_);
  cu::embedding_backward(g(wte_), wpe_ >= 0 ? g(wpe_) : nullptr, d, tokens, n, s, h,
                         static_cast<int>(o_.tp_rank * vocab_local_), static_cast<int>(vocab_local_));
}

// Final norm, output layer and vocab-parallel cross-entropy, forward and backward: the logits
// are overwritten by their gradient, so the vocabulary-sized tensor exists once.
template <class T>
void GpuModel<T>::head_forward_backward(const T* x, T* dx, const int* targets, int n, float dloss,
                                        DeviceCommunicator& tp, float* loss_sum) {
  const int h = static_cast<int>(m_.hidden), v = static_cast<int>(vocab_local_), nl = local_tokens(n);
  const int vocab_start = static_cast<int>(o_.tp_rank * vocab_local_);
  const int64_t head = head_ >= 0 ? head_ : wte_;
  const DType f32 = DType::kF32;
  DeviceArray<T> xf_local(static_cast<int64_t>(nl) * h), xf_full(sequence_parallel() ? static_cast<int64_t>(n) * h : 0),
      logits(static_cast<int64_t>(n) * v), dxf(static_cast<int64_t>(n) * h);
  DeviceArray<float> sa(nl), sb(nl), mx(n), stats(2 * static_cast<int64_t>(n)), losses(n);
  norm_forward(lnf_w_, lnf_b_, xf_local.data(), sa.data(), sb.data(), x, nl);
  const T* xf = xf_local.data();
  if (sequence_parallel()) gather_tokens(xf_full.data(), xf, n, tp), xf = xf_full.data();
  cu::set_stream(stream_);
  cu::matmul_forward(logits.data(), xf, w(head), static_cast<const T*>(nullptr), n, h, v);
  cu::row_max(mx.data(), logits.data(), n, v);
  tp.all_reduce_async(mx.data(), n, f32, ReduceOp::kMax, stream_);
  cu::row_sum_exp_and_target(stats.data(), stats.data() + n, logits.data(), mx.data(), targets, n, v, vocab_start);
  tp.all_reduce_async(stats.data(), 2 * static_cast<int64_t>(n), f32, ReduceOp::kSum, stream_);
  cu::set_stream(stream_);
  cu::cross_entropy_fused(losses.data(), logits.data(), logits.data(), mx.data(), stats.data(), stats.data() + n,
                          targets, dloss, n, v, vocab_start);
  cu::sum_into(loss_sum, losses.data(), n);
  cu::matmul_backward(dxf.data(), g(head), nullptr, logits.data(), xf, w(head), n, h, v, false);
  reduce_tokens(xf_local.data(), dxf.data(), n, tp);  // vocab-parallel: partial input gradients
  norm_backward(lnf_w_, lnf_b_, dx, xf_local.data(), x, sa.data(), sb.data(), nl);
}

template <class T>
void GpuModel<T>::forward(MicroBatch& mb, const int* tokens, const int* targets, const T* input, T* output, int b,
                          int s, float dloss, DeviceCommunicator& tp, float* loss_sum) {
  const int n = b * s;
  const int64_t local = static_cast<int64_t>(local_tokens(n)) * m_.hidden;
  DeviceArray<T> x(local);
  if (first_stage()) {
    mb.tokens = tokens;
    embed_forward(x.data(), tokens, n, s, tp);
  } else {
    cu::check(cudaMemcpyAsync(x.data(), input, local * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "stage input");
  }
  mb.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    layer_forward(layers_[l], mb.layers[l], x.data(), b, s, tp);
    if (o_.recompute == Recompute::kFull) mb.layers[l].keep_input_only();
  }
  if (!last_stage()) {
    cu::check(cudaMemcpyAsync(output, x.data(), local * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "stage output");
    return;
  }
  mb.dhead = DeviceArray<T>(local);
  cu::check(cudaMemsetAsync(mb.dhead.data(), 0, local * sizeof(T), stream_), "zero head gradient");
  head_forward_backward(x.data(), mb.dhead.data(), targets, n, dloss, tp, loss_sum);
}

template <class T>
void GpuModel<T>::backward(MicroBatch& mb, const T* dout, T* dinput, int b, int s, DeviceCommunicator& tp,
                           const std::function<void(int)>& layer_done) {
  const int n = b * s;
  const int64_t local = static_cast<int64_t>(local_tokens(n)) * m_.hidden;
  DeviceArray<T> dx;
  if (last_stage()) {
    dx = std::move(mb.dhead);
  } else {
    dx = DeviceArray<T>(local);
    cu::check(cudaMemcpyAsync(dx.data(), dout, local * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "stage gradient");
  }
  if (o_.split_weight_gradients) mb.weight_gemms.resize(layers_.size());
  for (size_t l = layers_.size(); l-- > 0;) {
    Cache& c = mb.layers[l];
    if (o_.recompute == Recompute::kFull) {
      DeviceArray<T> x(local);
      cu::check(cudaMemcpyAsync(x.data(), c.x.data(), local * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "recompute");
      layer_forward(layers_[l], c, x.data(), b, s, tp);  // the same TP collectives on every rank
    }
    std::vector<WeightGemm>* later = o_.split_weight_gradients ? &mb.weight_gemms[l] : nullptr;
    mlp_backward(layers_[l], c, dx.data(), b, s, tp, later);
    attention_backward(layers_[l], c, dx.data(), b, s, tp, later);
    c = Cache{};
    if (layer_done && !later) layer_done(static_cast<int>(l));
  }
  mb.layers.clear();
  if (first_stage()) embed_backward(dx.data(), mb.tokens, n, s, tp);
  else cu::check(cudaMemcpyAsync(dinput, dx.data(), local * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "stage input gradient");
}

// W of ZB-H1: the weight-gradient GEMMs B left, last layer first (the order B ran them in). The
// copies they read were made on this stream, and freed here they may be reused at once.
template <class T>
void GpuModel<T>::weight_backward(MicroBatch& mb, const std::function<void(int)>& layer_done) {
  cu::set_stream(stream_);
  for (size_t l = mb.weight_gemms.size(); l-- > 0;) {
    for (const WeightGemm& job : mb.weight_gemms[l])
      cu::matmul_backward(static_cast<T*>(nullptr), g(job.weight), job.bias >= 0 ? g(job.bias) : nullptr,
                          job.dout.data(), job.x.data(), static_cast<const T*>(nullptr), job.n, job.c, job.oc);
    mb.weight_gemms[l].clear();
    if (layer_done) layer_done(static_cast<int>(l));
  }
  mb.weight_gemms.clear();
}

template class GpuModel<float>;
template class GpuModel<cu::bf16>;
template class GpuModel<cu::fp16>;

}  // namespace parallax
