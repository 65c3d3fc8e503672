// The fp32 CUDA-core fallback of the fused attention (kernels/cuda/attention.cu dispatches here):
// any storage type, head_dim up to 256, any alignment.
#include "kernels/cuda/attention_internal.cuh"

namespace parallax::kernels::cuda::attention_detail {

namespace {

// ---------------------------------------------------------------------------------------------
// fp32 fallback (any storage type, head_dim <= 256). A block of 8 warps owns 8 consecutive rows
// (queries; keys for dK/dV), one per warp, and the other side streams through shared memory 32
// rows at a time, one row per lane, so a softmax max or sum is one warp reduction per 32 keys.
// Each lane keeps D / 32 <= 8 output columns. Shared rows are padded to an odd stride (D + 1
// floats): lane j reading element i of row j hits bank (j (D + 1) + i) mod 32, distinct per lane.
constexpr int kFbRows = 8;
constexpr int kFbThreads = kFbRows * 32;
constexpr int kFbCols = 32;
constexpr int kFbRegs = kMaxHeadDim / 32;

template <class T>
__device__ void fb_load_rows(float* dst, const T* head, long row_stride, int row0, int rows, const AttentionShape& s) {
  const int ld = s.d + 1;
  for (int i = threadIdx.x; i < rows * s.d; i += kFbThreads) {
    const int r = i / s.d, c = i % s.d;
    dst[r * ld + c] = row0 + r < s.t ? to_float(head[(row0 + r) * row_stride + c]) : 0.0f;
  }
}
__device__ inline float fb_dot(const float* a, const float* b, int d) {
  float acc = 0.0f;
  for (int i = 0; i < d; ++i) acc = fmaf(a[i], b[i], acc);
  return acc;
}
// acc[c / 32] += sum_j w_j rows[j][c] over this lane's columns c, w_j held by lane j.
__device__ inline void fb_accumulate(float (&acc)[kFbRegs], float w, const float* rows, int n_rows, int d) {
  const int lane = threadIdx.x % 32;
  for (int j = 0; j < n_rows; ++j) {
    const float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
    for (int r = 0; r < kFbRegs; ++r)
      if (lane + 32 * r < d) acc[r] = fmaf(wj, rows[j * (d + 1) + lane + 32 * r], acc[r]);
  }
}
template <class T>
__device__ void fb_store_row(T* row, const float (&acc)[kFbRegs], float scale, int d) {
#pragma unroll
  for (int r = 0; r < kFbRegs; ++r) {
    const int c = threadIdx.x % 32 + 32 * r;
    if (c < d) row[c] = from_float<T>(acc[r] * scale);
  }
}

template <class T>
__global__ void __launch_bounds__(kFbThreads)
    fwd_fallback_kernel(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, int tiles,
                        float scale_log2) {
  extern __shared__ float fsm[];
  const int ld = s.d + 1;
  float* q_s = fsm;
  float* k_s = q_s + kFbRows * ld;
  float* v_s = k_s + kFbCols * ld;
  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = at.tile * kFbRows, t = t0 + warp;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  fb_load_rows(q_s, head_base(q, s, at.batch, s.h, at.head), q_stride, t0, kFbRows, s);
  float o[kFbRegs] = {};
  float m = -INFINITY, l = 0.0f;
  const int last_key = min(t0 + kFbRows - 1, s.t - 1);
  for (int u0 = 0; u0 <= last_key; u0 += kFbCols) {
    __syncthreads();
    fb_load_rows(k_s, head_base(k, s, at.batch, s.kvh, kv_head), kv_stride, u0, kFbCols, s);
    fb_load_rows(v_s, head_base(v, s, at.batch, s.kvh, kv_head), kv_stride, u0, kFbCols, s);
    __syncthreads();
    if (t >= s.t || u0 > t) continue;  // warp-uniform
    const int u = u0 + lane;
    const float x = u <= t ? fb_dot(q_s + warp * ld, k_s + lane * ld, s.d) * scale_log2 : -INFINITY;
    const float m_new = fmaxf(m, warp_max(x));  // finite: key u0 <= t is unmasked
    const float alpha = exp2f(m - m_new), p = exp2f(x - m_new);
    l = l * alpha + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int r = 0; r < kFbRegs; ++r) o[r] *= alpha;
    fb_accumulate(o, p, v_s, min(kFbCols, t - u0 + 1), s.d);
  }
  if (t >= s.t) return;
  fb_store_row(head_base(out, s, at.batch, s.h, at.head) + t * q_stride, o, 1.0f / l, s.d);
  if (lane == 0) lse[(static_cast<long>(at.batch) * s.h + at.head) * s.t + t] = (m + log2f(l)) * kLn2;
}

template <class T>
__global__ void __launch_bounds__(kFbThreads)
    dq_fallback_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                       AttentionShape s, int tiles, float scale_log2, float scale) {
  extern __shared__ float fsm[];
  const int ld = s.d + 1;
  float* q_s = fsm;
  float* do_s = q_s + kFbRows * ld;
  float* k_s = do_s + kFbRows * ld;
  float* v_s = k_s + kFbCols * ld;
  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t0 = at.tile * kFbRows, t = t0 + warp;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  fb_load_rows(q_s, head_base(q, s, at.batch, s.h, at.head), q_stride, t0, kFbRows, s);
  fb_load_rows(do_s, head_base(dout, s, at.batch, s.h, at.head), q_stride, t0, kFbRows, s);
  const long row = (static_cast<long>(at.batch) * s.h + at.head) * s.t + t;
  const float lse2 = t < s.t ? lse[row] * kLog2e : 0.0f, row_delta = t < s.t ? delta[row] : 0.0f;
  float acc[kFbRegs] = {};
  const int last_key = min(t0 + kFbRows - 1, s.t - 1);
  for (int u0 = 0; u0 <= last_key; u0 += kFbCols) {
    __syncthreads();
    fb_load_rows(k_s, head_base(k, s, at.batch, s.kvh, kv_head), kv_stride, u0, kFbCols, s);
    fb_load_rows(v_s, head_base(v, s, at.batch, s.kvh, kv_head), kv_stride, u0, kFbCols, s);
    __syncthreads();
    if (t >= s.t || u0 > t) continue;  // warp-uniform
    float ds = 0.0f;
    if (u0 + lane <= t) {
      const float p = exp2f(fb_dot(q_s + warp * ld, k_s + lane * ld, s.d) * scale_log2 - lse2);
      ds = p * (fb_dot(do_s + warp * ld, v_s + lane * ld, s.d) - row_delta);
    }
    fb_accumulate(acc, ds, k_s, min(kFbCols, t - u0 + 1), s.d);
  }
  if (t < s.t) fb_store_row(head_base(dq, s, at.batch, s.h, at.head) + t * q_stride, acc, scale, s.d);
}

template <class T>
__global__ void __launch_bounds__(kFbThreads)
    dkv_fallback_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                        const float* delta, AttentionShape s, int tiles, float scale_log2, float scale) {
  extern __shared__ float fsm[];
  const int ld = s.d + 1;
  float* k_s = fsm;
  float* v_s = k_s + kFbRows * ld;
  float* q_s = v_s + kFbRows * ld;
  float* do_s = q_s + kFbCols * ld;
  float* lse_s = do_s + kFbCols * ld;
  float* delta_s = lse_s + kFbCols;
  const TileIndex at = tile_index(s.kvh, s.b, tiles, false);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, u0 = at.tile * kFbRows, u = u0 + warp;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int group = s.h / s.kvh;
  fb_load_rows(k_s, head_base(k, s, at.batch, s.kvh, at.head), kv_stride, u0, kFbRows, s);
  fb_load_rows(v_s, head_base(v, s, at.batch, s.kvh, at.head), kv_stride, u0, kFbRows, s);
  float dk_acc[kFbRegs] = {}, dv_acc[kFbRegs] = {};
  for (int h = at.head * group; h < (at.head + 1) * group; ++h)
    for (int t0 = u0; t0 < s.t; t0 += kFbCols) {  // earlier queries see none of the block's keys
      __syncthreads();
      fb_load_rows(q_s, head_base(q, s, at.batch, s.h, h), q_stride, t0, kFbCols, s);
      fb_load_rows(do_s, head_base(dout, s, at.batch, s.h, h), q_stride, t0, kFbCols, s);
      if (threadIdx.x < kFbCols) {
        const int t = t0 + threadIdx.x;
        const long row = (static_cast<long>(at.batch) * s.h + h) * s.t + t;
        lse_s[threadIdx.x] = t < s.t ? lse[row] * kLog2e : 0.0f;
        delta_s[threadIdx.x] = t < s.t ? delta[row] : 0.0f;
      }
      __syncthreads();
      if (u >= s.t) continue;  // warp-uniform
      const int t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < s.t && t >= u) {
        p = exp2f(fb_dot(q_s + lane * ld, k_s + warp * ld, s.d) * scale_log2 - lse_s[lane]);
        ds = p * (fb_dot(do_s + lane * ld, v_s + warp * ld, s.d) - delta_s[lane]);
      }
      const int n_rows = min(kFbCols, s.t - t0);
      fb_accumulate(dv_acc, p, do_s, n_rows, s.d);
      fb_accumulate(dk_acc, ds, q_s, n_rows, s.d);
    }
  if (u >= s.t) return;
  fb_store_row(head_base(dk, s, at.batch, s.kvh, at.head) + u * kv_stride, dk_acc, scale, s.d);
  fb_store_row(head_base(dv, s, at.batch, s.kvh, at.head) + u * kv_stride, dv_acc, 1.0f, s.d);
}
int fallback_smem_bytes(int d, int own_rows) { return ((own_rows + 2 * kFbCols) * (d + 1) + 2 * kFbCols) * 4; }

}  // namespace

template <class T>
void forward_fallback(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, float scale_log2) {
  const int tiles = ceil_div(s.t, kFbRows), smem = fallback_smem_bytes(s.d, kFbRows);
  allow_smem(fwd_fallback_kernel<T>, smem);
  fwd_fallback_kernel<T><<<grid_blocks(tiles, s.h, s.b), kFbThreads, smem, stream()>>>(out, lse, q, k, v, s, tiles,
                                                                                       scale_log2);
  check_launch("flash_attention_forward (fallback)");
}

template <class T>
void backward_fallback(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                       const float* delta, AttentionShape s, float scale_log2, float scale) {
  const int tiles = ceil_div(s.t, kFbRows), smem = fallback_smem_bytes(s.d, 2 * kFbRows);
  allow_smem(dkv_fallback_kernel<T>, smem);
  dkv_fallback_kernel<T><<<grid_blocks(tiles, s.kvh, s.b), kFbThreads, smem, stream()>>>(
      dk, dv, dout, q, k, v, lse, delta, s, tiles, scale_log2, scale);
  check_launch("flash_attention_backward dK/dV (fallback)");
  allow_smem(dq_fallback_kernel<T>, smem);
  dq_fallback_kernel<T><<<grid_blocks(tiles, s.h, s.b), kFbThreads, smem, stream()>>>(
      dq, dout, q, k, v, lse, delta, s, tiles, scale_log2, scale);
  check_launch("flash_attention_backward dQ (fallback)");
}

#define PARALLAX_INSTANTIATE_FALLBACK(T)                                                                           \
  template void forward_fallback<T>(T*, float*, const T*, const T*, const T*, AttentionShape, float);               \
  template void backward_fallback<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const float*, const float*, \
                                     AttentionShape, float, float);
PARALLAX_INSTANTIATE_FALLBACK(float)
PARALLAX_INSTANTIATE_FALLBACK(bf16)
PARALLAX_INSTANTIATE_FALLBACK(fp16)
#undef PARALLAX_INSTANTIATE_FALLBACK

}  // namespace parallax::kernels::cuda::attention_detail
