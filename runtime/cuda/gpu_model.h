// GpuModel: one rank's share of the transformer on a GPU — the model of runtime/transformer.h
// (same parameters, names, shards and initialization; same math, op for op), with activations
// and compute weights in T (fp32, bf16 or fp16) and fp32 master weights and gradients (the AdamW
// moments are the trainer's). Parameters live in flat arrays in the CPU model's parameter order, so one AdamW launch
// updates them all, and each layer's gradients are one contiguous range that the data-parallel
// reduction sends as one bucket as soon as that layer's backward is done.
//
// A GpuModel holds one pipeline stage (one model chunk): layers [pp_rank L/pp, (pp_rank + 1)
// L/pp), the embedding on the first stage, the final norm, output layer and loss on the last.
// Attention is the fused kernel (kernels/cuda/attention.h): it keeps no probabilities, so
// selective recompute has nothing to drop and equals no recompute; full recompute keeps each
// layer's input only and re-runs its forward before its backward. All work is issued on the
// compute stream given at construction; TP collectives sit on it too (Megatron without TP overlap).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "models/status.h"
#include "program/plan.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/device_communicator.h"
#include "runtime/transformer.h"

namespace parallax {

// One parameter tensor's place in the flat arrays.
struct GpuTensor {
  std::string name;
  int64_t offset = 0, size = 0;
  bool tp_replicated = false;  // the same on every TP rank (norms, row biases, positions)
  bool sp_partial = false;     // a norm parameter: under SP its gradient is a partial sum over TP
  ParamRole role = ParamRole::kMatrix;
};

struct GpuModelOptions {
  int tp = 1, tp_rank = 0, pp = 1, pp_rank = 0;
  uint64_t seed = 1234;
  // Exact: the CPU runtime's initialization (every value identical; needs the stage's parameters
  // in host memory once). Otherwise a fast on-device fill of the same scale, for benchmarks.
  bool exact_init = true;
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  // The flat arrays are padded to a multiple of 128 x shards elements, so ZeRO can cut them into
  // `shards` equal, aligned pieces.
  int shards = 1;
  Plan::LayerRange stage_layers;  // uneven pipelines: this stage's layers; count 0 = m.layers / pp
  // Zero-bubble schedules (ZB-H1): backward() leaves the linear layers' weight-gradient GEMMs to
  // weight_backward().
  bool split_weight_gradients = false;
};

template <class T>
class GpuModel {
 public:
  struct MicroBatch;  // what one micro-batch keeps between its forward and backward

  static Result<std::unique_ptr<GpuModel>> create(const ModelSpec& m, const GpuModelOptions& o, cudaStream_t stream);
  // The parameter tensors create() would lay out, without a device (for tests and planning).
  static Result<std::vector<GpuTensor>> tensor_layout(const ModelSpec& m, const GpuModelOptions& o);
  ~GpuModel();

  bool first_stage() const { return o_.pp_rank == 0; }
  bool last_stage() const { return o_.pp_rank == o_.pp - 1; }
  int local_tokens(int n) const { return sequence_parallel() ? n / o_.tp : n; }
  bool sequence_parallel() const { return o_.sequence_parallel && o_.tp > 1; }
  DType dtype() const;

  // Flat parameter storage, in the order of tensors().
  const std::vector<GpuTensor>& tensors() const { return tensors_; }
  int64_t param_count() const { return count_; }
  float* master() { return master_.data(); }  // null after release_master()
  // ZeRO: the optimizer keeps only its shard of the fp32 masters; the full copy goes.
  void release_master() { master_.reset(); }
  T* weights() { return compute_.data(); }
  float* grads() { return grad_.data(); }
  // The gradient range of each layer of this stage (index = layer within the stage) and of the
  // embedding / head tensors (everything before the first layer).
  struct Range {
    int64_t offset = 0, size = 0;
  };
  const std::vector<Range>& layer_ranges() const { return layer_ranges_; }
  Range head_range() const { return {0, layer_ranges_.empty() ? count_ : layer_ranges_.front().offset}; }

  // Forward of a micro-batch of b sequences of s tokens (device tokens / targets). The first stage
  // reads `tokens`, others `input` (local tokens x h, in T). The last stage computes the loss, adds
  // the token losses to *loss_sum (device) and the loss gradient (each token weighted by dloss);
  // others write their output to `output`.
  void forward(MicroBatch& mb, const int* tokens, const int* targets, const T* input, T* output, int b, int s,
               float dloss, DeviceCommunicator& tp, float* loss_sum);
  // Backward: `dout` is the gradient of the stage output (unused on the last stage); writes the
  // input gradient to `dinput` (unused on the first). Gradients accumulate into grads();
  // after layer l's backward, `layer_done(l)` is called (the trainer starts that layer's DP
  // reduction). `mb` is consumed.
  // With split weight gradients (ZB-H1) the backward is B, the data gradients: each linear layer's
  // input-gradient GEMM runs, and its weight-gradient GEMM (with its bias gradient) is left in `mb`
  // with copies of its two operands (the SP-gathered input and the output gradient); norms and the
  // embedding take their gradients in B as before (their kernels fuse them with the data
  // gradients). weight_backward() is then W: it launches those GEMMs, calls `layer_done(l)` after
  // layer l's (B calls none) and consumes `mb`. It reads no weights.
  void backward(MicroBatch& mb, const T* dout, T* dinput, int b, int s, DeviceCommunicator& tp,
                const std::function<void(int)>& layer_done);
  void weight_backward(MicroBatch& mb, const std::function<void(int)>& layer_done);

  std::unique_ptr<MicroBatch> new_micro_batch() const;

 private:
  struct Layer;
  struct Cache;
  struct WeightGemm;  // a weight-gradient GEMM B leaves for W (gpu_model_cache.h)
  GpuModel(const ModelSpec& m, const GpuModelOptions& o, cudaStream_t stream) : m_(m), o_(o), stream_(stream) {}
  static Result<std::unique_ptr<GpuModel>> configure(const ModelSpec& m, const GpuModelOptions& o, cudaStream_t stream);
  void layout();
  void add(const std::string& name, int64_t size, bool replicated, ParamRole role);
  Status initialize();
  void refresh_weights();  // the compute copy from the fp32 masters
  T* w(int64_t tensor) { return compute_.data() + tensors_[tensor].offset; }
  float* g(int64_t tensor) { return grad_.data() + tensors_[tensor].offset; }
  void norm_forward(int64_t w, int64_t b, T* out, float* sa, float* sb, const T* in, int n);
  void norm_backward(int64_t w, int64_t b, T* din, const T* dout, const T* in, const float* sa, const float* sb, int n);
  void gather_tokens(T* full, const T* local, int n, DeviceCommunicator& tp);  // SP only
  void reduce_tokens(T* local, T* full, int n, DeviceCommunicator& tp);
  void layer_forward(const Layer& L, Cache& c, T* x, int b, int s, DeviceCommunicator& tp);
  // The backward halves accumulate the weight gradients now, or, given `later`, leave them there.
  void attention_backward(const Layer& L, Cache& c, T* dx, int b, int s, DeviceCommunicator& tp,
                          std::vector<WeightGemm>* later);
  void mlp_backward(const Layer& L, Cache& c, T* dx, int b, int s, DeviceCommunicator& tp, std::vector<WeightGemm>* later);
  // dinp = dout W (written) and the gradients of weight tensor `wt` and bias `bt` (-1: none).
  void linear_backward(T* dinp, int64_t wt, int64_t bt, const T* dout, const T* x, int n, int c, int oc,
                       std::vector<WeightGemm>* later);
  void head_forward_backward(const T* x, T* dx, const int* targets, int n, float dloss, DeviceCommunicator& tp,
                             float* loss_sum);
  void embed_forward(T* x, const int* tokens, int n, int s, DeviceCommunicator& tp);
  void embed_backward(const T* dx, const int* tokens, int n, int s, DeviceCommunicator& tp);

  ModelSpec m_;
  GpuModelOptions o_;
  cudaStream_t stream_;
  int64_t vocab_padded_ = 0, vocab_local_ = 0, q_local_ = 0, kv_local_ = 0, ffn_local_ = 0, fc1_local_ = 0;
  int64_t first_layer_ = 0, stage_layers_ = 0, count_ = 0;
  std::vector<GpuTensor> tensors_;
  std::vector<Layer> layers_;
  std::vector<Range> layer_ranges_;
  int64_t wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, head_ = -1;
  DeviceArray<float> master_, grad_;
  DeviceArray<T> compute_;
};

}  // namespace parallax
