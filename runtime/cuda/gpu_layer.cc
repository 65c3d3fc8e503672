// One GPU transformer layer's forward and backward on this rank's TP shard: runtime/
// transformer_layer.cc op for op, on device buffers. Every temporary lives on the compute stream
// only, so the caching allocator may hand a freed block to the next allocation without a fence.
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "runtime/cuda/gpu_model_cache.h"

namespace parallax {

namespace cu = kernels::cuda;

template <class T>
void GpuModel<T>::norm_forward(int64_t wt, int64_t bt, T* out, float* sa, float* sb, const T* in, int n) {
  const int h = static_cast<int>(m_.hidden);
  cu::set_stream(stream_);
  if (m_.norm == Norm::kLayerNorm) cu::layernorm_forward(out, sa, sb, in, w(wt), bt >= 0 ? w(bt) : nullptr, n, h,
                                                      static_cast<float>(m_.norm_eps));
  else cu::rmsnorm_forward(out, sa, in, w(wt), n, h, static_cast<float>(m_.norm_eps));
}

template <class T>
void GpuModel<T>::norm_backward(int64_t wt, int64_t bt, T* din, const T* dout, const T* in, const float* sa,
                                const float* sb, int n) {
  const int h = static_cast<int>(m_.hidden);
  cu::set_stream(stream_);
  if (m_.norm == Norm::kLayerNorm)
    cu::layernorm_backward(din, g(wt), bt >= 0 ? g(bt) : nullptr, dout, in, w(wt), sa, sb, n, h);
  else cu::rmsnorm_backward(din, g(wt), dout, in, w(wt), sa, n, h);
}

// Under SP each rank holds n / t of the tokens outside the TP regions: all-gather before the
// column-parallel GEMMs, reduce-scatter after the row-parallel ones. Without SP the stream is
// replicated: callers read the local tensor itself (gathering is nothing) and the partial sums
// are all-reduced.
template <class T>
void GpuModel<T>::gather_tokens(T* full, const T* local, int n, DeviceCommunicator& tp) {
  if (sequence_parallel()) tp.all_gather_async(full, local, n / o_.tp * m_.hidden, dtype(), stream_);
}

template <class T>
void GpuModel<T>::reduce_tokens(T* local, T* full, int n, DeviceCommunicator& tp) {
  const int64_t h = m_.hidden;
  if (sequence_parallel()) {
    tp.reduce_scatter_async(local, full, n / o_.tp * h, dtype(), stream_);
    return;
  }
  tp.all_reduce_async(full, n * h, dtype(), ReduceOp::kSum, stream_);
  if (local != full)
    cu::check(cudaMemcpyAsync(local, full, n * h * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "reduce tokens");
}

namespace {
template <class T>
void copy(T* dst, const T* src, int64_t n, cudaStream_t s) {
  cu::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s), "copy activations");
}
template <class T>
DeviceArray<T> copy_of(const T* src, int64_t n, cudaStream_t s) {
  DeviceArray<T> out(n);
  copy(out.data(), src, n, s);
  return out;
}
}  // namespace

// Split, the operands are copied: B goes on to overwrite or free the buffers they are in.
template <class T>
void GpuModel<T>::linear_backward(T* dinp, int64_t wt, int64_t bt, const T* dout, const T* x, int n, int c, int oc,
                                  std::vector<WeightGemm>* later) {
  cu::set_stream(stream_);
  if (!later) {
    cu::matmul_backward(dinp, g(wt), bt >= 0 ? g(bt) : nullptr, dout, x, w(wt), n, c, oc, false);
    return;
  }
  cu::matmul_backward(dinp, static_cast<float*>(nullptr), static_cast<float*>(nullptr), dout, x, w(wt), n, c, oc, false);
  const int64_t rows = n;  // the copies' sizes, in 64 bits
  later->push_back({wt, bt, copy_of(x, rows * c, stream_), copy_of(dout, rows * oc, stream_), n, c, oc});
}

template <class T>
void GpuModel<T>::layer_forward(const Layer& L, Cache& c, T* x, int b, int s, DeviceCommunicator& tp) {
  const int n = b * s, h = static_cast<int>(m_.hidden), hd = static_cast<int>(m_.head_dim), nl = local_tokens(n);
  const int ql = static_cast<int>(q_local_), kvl = static_cast<int>(kv_local_), width = ql + 2 * kvl;
  const int heads = static_cast<int>(m_.heads / o_.tp), kv_heads = static_cast<int>(m_.kv_heads / o_.tp);
  const int fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  const int64_t local = static_cast<int64_t>(nl) * h, full = static_cast<int64_t>(n) * h;
  const bool sp = sequence_parallel();
  c.x = DeviceArray<T>(local), c.a = DeviceArray<T>(local), c.n1a = DeviceArray<float>(nl), c.n1b = DeviceArray<float>(nl);
  copy(c.x.data(), x, local, stream_);
  norm_forward(L.ln1_w, L.ln1_b, c.a.data(), c.n1a.data(), c.n1b.data(), x, nl);
  DeviceArray<T> gathered(sp ? full : 0), qkv(static_cast<int64_t>(n) * width), y(full);
  const T* a_full = sp ? gathered.data() : c.a.data();
  gather_tokens(gathered.data(), c.a.data(), n, tp);
  cu::set_stream(stream_);
  cu::matmul_forward(qkv.data(), a_full, w(L.qkv_w), L.qkv_b >= 0 ? w(L.qkv_b) : nullptr, n, h, width);
  c.q = DeviceArray<T>(static_cast<int64_t>(n) * ql), c.k = DeviceArray<T>(static_cast<int64_t>(n) * kvl);
  c.v = DeviceArray<T>(c.k.size()), c.o = DeviceArray<T>(c.q.size());
  c.lse = DeviceArray<float>(static_cast<int64_t>(b) * heads * s);
  cu::get_columns(c.q.data(), qkv.data(), n, width, 0, ql);
  cu::get_columns(c.k.data(), qkv.data(), n, width, ql, kvl);
  cu::get_columns(c.v.data(), qkv.data(), n, width, ql + kvl, kvl);
  qkv.reset();
  const float base = static_cast<float>(m_.rope_theta);
  if (m_.positions == Positions::kRotary) {
    cu::rope_forward(c.q.data(), b, s, heads, hd, base);
    cu::rope_forward(c.k.data(), b, s, kv_heads, hd, base);
  }
  cu::flash_attention_forward(c.o.data(), c.lse.data(), c.q.data(), c.k.data(), c.v.data(), {b, s, heads, kv_heads, hd});
  // One TP rank reduces nothing, so a row-parallel GEMM's bias can ride in its epilogue.
  const T* proj_bias = o_.tp == 1 && L.proj_b >= 0 ? w(L.proj_b) : nullptr;
  cu::matmul_forward(y.data(), c.o.data(), w(L.proj_w), proj_bias, n, ql, h);
  DeviceArray<T> y_scattered(sp ? local : 0);
  T* y_local = sp ? y_scattered.data() : y.data();
  reduce_tokens(y_local, y.data(), n, tp);
  cu::set_stream(stream_);
  if (L.proj_b >= 0 && !proj_bias) cu::add_bias(y_local, w(L.proj_b), nl, h);
  cu::add(x, x, y_local, local);
  c.x1 = DeviceArray<T>(local), c.a2 = DeviceArray<T>(local), c.n2a = DeviceArray<float>(nl), c.n2b = DeviceArray<float>(nl);
  copy(c.x1.data(), x, local, stream_);
  norm_forward(L.ln2_w, L.ln2_b, c.a2.data(), c.n2a.data(), c.n2b.data(), x, nl);
  a_full = sp ? gathered.data() : c.a2.data();
  gather_tokens(gathered.data(), c.a2.data(), n, tp);
  c.u = DeviceArray<T>(static_cast<int64_t>(n) * f1), c.g = DeviceArray<T>(static_cast<int64_t>(n) * fl);
  cu::set_stream(stream_);
  cu::matmul_forward(c.u.data(), a_full, w(L.fc1_w), L.fc1_b >= 0 ? w(L.fc1_b) : nullptr, n, h, f1);
  if (m_.mlp == Mlp::kSwiGlu) cu::swiglu_forward(c.g.data(), c.u.data(), n, fl);
  else cu::gelu_forward(c.g.data(), c.u.data(), static_cast<long>(c.u.size()));
  const T* fc2_bias = o_.tp == 1 && L.fc2_b >= 0 ? w(L.fc2_b) : nullptr;
  cu::matmul_forward(y.data(), c.g.data(), w(L.fc2_w), fc2_bias, n, fl, h);
  reduce_tokens(y_local, y.data(), n, tp);
  cu::set_stream(stream_);
  if (L.fc2_b >= 0 && !fc2_bias) cu::add_bias(y_local, w(L.fc2_b), nl, h);
  cu::add(x, x, y_local, local);
}

// The MLP half of the backward: dx is the gradient of the layer output (of the FC2 output and of
// the residual); on return it is the gradient of x1.
template <class T>
void GpuModel<T>::mlp_backward(const Layer& L, Cache& c, T* dx, int b, int s, DeviceCommunicator& tp,
                               std::vector<WeightGemm>* later) {
  const int n = b * s, h = static_cast<int>(m_.hidden), nl = local_tokens(n);
  const int fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  const int64_t full = static_cast<int64_t>(n) * h;
  const bool sp = sequence_parallel();
  DeviceArray<T> dy_full(sp ? full : 0), a_gathered(sp ? full : 0), dg(static_cast<int64_t>(n) * fl),
      du(static_cast<int64_t>(n) * f1), da(full), da_scattered(sp ? static_cast<int64_t>(nl) * h : 0);
  const T* dy = sp ? dy_full.data() : dx;
  gather_tokens(dy_full.data(), dx, n, tp);
  linear_backward(dg.data(), L.fc2_w, L.fc2_b, dy, c.g.data(), n, fl, h, later);
  if (m_.mlp == Mlp::kSwiGlu) cu::swiglu_backward(du.data(), c.u.data(), dg.data(), n, fl, /*accumulate=*/false);
  else cu::gelu_backward(du.data(), c.u.data(), dg.data(), static_cast<long>(du.size()), /*accumulate=*/false);
  const T* a_full = sp ? a_gathered.data() : c.a2.data();
  gather_tokens(a_gathered.data(), c.a2.data(), n, tp);  // SP kept only this rank's tokens
  linear_backward(da.data(), L.fc1_w, L.fc1_b, du.data(), a_full, n, h, f1, later);
  T* da_local = sp ? da_scattered.data() : da.data();
  reduce_tokens(da_local, da.data(), n, tp);  // column-parallel: partial input gradients
  norm_backward(L.ln2_w, L.ln2_b, dx, da_local, c.x1.data(), c.n2a.data(), c.n2b.data(), nl);
}

// The attention half: dx is the gradient of x1 (of the projection output and of the residual);
// on return it is the gradient of the layer input.
template <class T>
void GpuModel<T>::attention_backward(const Layer& L, Cache& c, T* dx, int b, int s, DeviceCommunicator& tp,
                                     std::vector<WeightGemm>* later) {
  const int n = b * s, h = static_cast<int>(m_.hidden), hd = static_cast<int>(m_.head_dim), nl = local_tokens(n);
  const int ql = static_cast<int>(q_local_), kvl = static_cast<int>(kv_local_), width = ql + 2 * kvl;
  const int heads = static_cast<int>(m_.heads / o_.tp), kv_heads = static_cast<int>(m_.kv_heads / o_.tp);
  const int64_t full = static_cast<int64_t>(n) * h;
  const bool sp = sequence_parallel();
  DeviceArray<T> dy_full(sp ? full : 0), d_o(c.o.size()), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  const T* dy = sp ? dy_full.data() : dx;
  gather_tokens(dy_full.data(), dx, n, tp);
  linear_backward(d_o.data(), L.proj_w, L.proj_b, dy, c.o.data(), n, ql, h, later);
  cu::flash_attention_backward(dq.data(), dk.data(), dv.data(), d_o.data(), c.q.data(), c.k.data(), c.v.data(),
                               c.o.data(), c.lse.data(), {b, s, heads, kv_heads, hd});
  d_o.reset();
  const float base = static_cast<float>(m_.rope_theta);
  if (m_.positions == Positions::kRotary) {
    cu::rope_backward(dq.data(), b, s, heads, hd, base);
    cu::rope_backward(dk.data(), b, s, kv_heads, hd, base);
  }
  DeviceArray<T> dqkv(static_cast<int64_t>(n) * width);
  cu::set_columns(dqkv.data(), dq.data(), n, width, 0, ql);
  cu::set_columns(dqkv.data(), dk.data(), n, width, ql, kvl);
  cu::set_columns(dqkv.data(), dv.data(), n, width, ql + kvl, kvl);
  dq.reset(), dk.reset(), dv.reset();
  DeviceArray<T> a_gathered(sp ? full : 0), da(full), da_scattered(sp ? static_cast<int64_t>(nl) * h : 0);
  const T* a_full = sp ? a_gathered.data() : c.a.data();
  gather_tokens(a_gathered.data(), c.a.data(), n, tp);
  linear_backward(da.data(), L.qkv_w, L.qkv_b, dqkv.data(), a_full, n, h, width, later);
  T* da_local = sp ? da_scattered.data() : da.data();
  reduce_tokens(da_local, da.data(), n, tp);
  norm_backward(L.ln1_w, L.ln1_b, dx, da_local, c.x.data(), c.n1a.data(), c.n1b.data(), nl);
}

// The member functions defined here, for each storage type (the class itself is instantiated in
// gpu_model.cc, which cannot see these definitions).
#define PARALLAX_INSTANTIATE(T)                                                                                 \
  template void GpuModel<T>::norm_forward(int64_t, int64_t, T*, float*, float*, const T*, int);                \
  template void GpuModel<T>::norm_backward(int64_t, int64_t, T*, const T*, const T*, const float*, const float*, \
                                           int);                                                               \
  template void GpuModel<T>::gather_tokens(T*, const T*, int, DeviceCommunicator&);                            \
  template void GpuModel<T>::reduce_tokens(T*, T*, int, DeviceCommunicator&);                                  \
  template void GpuModel<T>::layer_forward(const Layer&, Cache&, T*, int, int, DeviceCommunicator&);           \
  template void GpuModel<T>::mlp_backward(const Layer&, Cache&, T*, int, int, DeviceCommunicator&,            \
                                          std::vector<WeightGemm>*);                                           \
  template void GpuModel<T>::attention_backward(const Layer&, Cache&, T*, int, int, DeviceCommunicator&,      \
                                                std::vector<WeightGemm>*);                                     \
  template void GpuModel<T>::linear_backward(T*, int64_t, int64_t, const T*, const T*, int, int, int,         \
                                             std::vector<WeightGemm>*);                                       
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(cu::bf16)
PARALLAX_INSTANTIATE(cu::fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax
