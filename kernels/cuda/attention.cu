// CUDA fused causal attention (kernels/cuda/attention.h), FlashAttention-2's algorithm. The forward
// streams key tiles past a tile of queries with an online softmax; the backward is three launches,
// all deterministic: D = rowsum(dO * O), then dK and dV parallel over key tiles, then dQ parallel
// over query tiles (recomputing P instead of adding dQ atomically). Two implementations: tensor
// cores (mma.sync m16n8k16, fp32 accumulators, scores and probabilities kept in registers) for
// bf16 / fp16 with head_dim 64 or 128, and an fp32 CUDA-core fallback for fp32 storage, any other
// head_dim up to 256 or unaligned pointers.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/device_utils.cuh"

#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace parallax::kernels::cuda {
namespace {

using namespace attention_detail;
using namespace attention_mma;

template <int D>
constexpr int fwd_smem_bytes() {
  return 3 * tile_bytes<D>();
}

// Grid: one block per (query tile, head, sequence). Shared: Q, K and V tiles. Q's fragments are
// read once into registers; K_{j+1} is fetched while P_j V_j runs and V_{j+1} while the next
// scores do.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    fwd_tc_kernel(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, int tiles, float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tile = q_tile + kTile * kLd<D>;
  T* v_tile = k_tile + kTile * kLd<D>;

  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q0 = at.tile * kTile;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  const T* k_head = head_base(k, s, at.batch, s.kvh, kv_head);
  const T* v_head = head_base(v, s, at.batch, s.kvh, kv_head);

  // cp.async groups, in order: {Q, K_0}, {V_0}, then per key tile {K_j+1}, {V_j+1} (empty past the
  // last tile), so "all but the newest group" is always the tile needed next.
  issue_tile<T, D>(q_tile, head_base(q, s, at.batch, s.h, at.head), q0, s.t, q_stride);
  issue_tile<T, D>(k_tile, k_head, 0, s.t, kv_stride);
  cp_async_commit();
  issue_tile<T, D>(v_tile, v_head, 0, s.t, kv_stride);
  cp_async_commit();
  Acc o[D / 8];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  // Causal: key tiles after the query tile are skipped entirely.
  for (int j = 0; j <= at.tile; ++j) {
    cp_async_wait<1>();
    __syncthreads();  // K_j (and Q) landed
    Acc sc[kTile / 8];
    zero(sc);
    mul_abt<T, D, kTile / 8>(sc, q_tile, warp * 16, k_tile, 0);
    __syncthreads();  // every warp is done with K_j
    if (j < at.tile) issue_tile<T, D>(k_tile, k_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
    // Every key of an earlier tile precedes every query of this one, so only the diagonal tile
    // (j == tile, keys and queries at the same offsets) needs a mask.
    float alpha[2];
    softmax_update(sc, m, l, alpha, scale_log2, j == at.tile ? warp * 16 : -1);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= alpha[0], o[n][1] *= alpha[0];
      o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    }
    unsigned p[kTile / 16][4];
    to_a<T>(p, sc);
    cp_async_wait<1>();
    __syncthreads();  // V_j landed
    mul_ab_acc<T, D, kTile / 16>(o, p, v_tile, 0);
    __syncthreads();  // every warp is done with V_j
    if (j < at.tile) issue_tile<T, D>(v_tile, v_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
  }
  cp_async_wait<0>();
  const int g = lane / 4;
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);
    inv[i] = 1.0f / l[i];
    const int t = q0 + warp * 16 + g + 8 * i;
    if (lane % 4 == 0 && t < s.t) lse[(static_cast<long>(at.batch) * s.h + at.head) * s.t + t] = (m[i] + log2f(l[i])) * kLn2;
  }
  store_rows<T, D>(head_base(out, s, at.batch, s.h, at.head), q_stride, q0 + warp * 16, s.t, o, inv, 1.0f,
                   q_tile + warp * 16 * kLd<D>);
}

template <int D>
constexpr int dkv_smem_bytes() {
  return 6 * tile_bytes<D>() + 4 * kTile * 4;
}

// Grid: one block per (key tile, KV head, sequence); it visits every (query head of the KV head's
// group, query tile at or after the key tile) in order, so GQA's sum over the group happens in
// registers, deterministically. Per step and 32 queries at a time: S^T = K Q^T, dP^T = V dO^T,
// P^T = exp(S^T - lse), dS^T = P^T (dP^T - D); dV += P^T dO; dK += dS^T Q (times scale at the end).
// Q, dO, lse and D are double-buffered: step n + 1's land while step n computes.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dkv_tc_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                  AttentionShape s, int tiles, float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = k_tile + kTile * kLd<D>;
  T* q_tiles = v_tile + kTile * kLd<D>;       // [2][64][kLd]
  T* do_tiles = q_tiles + 2 * kTile * kLd<D>;  // [2][64][kLd]
  float* lse_s = reinterpret_cast<float*>(do_tiles + 2 * kTile * kLd<D>);  // [2][64]
  float* delta_s = lse_s + 2 * kTile;                                      // [2][64]

  const TileIndex at = tile_index(s.kvh, s.b, tiles, false);  // early key tiles see the most queries
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int k0 = at.tile * kTile, group = s.h / s.kvh;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int q_tiles_n = tiles - at.tile, steps = group * q_tiles_n;
  auto step_head = [&](int n) { return at.head * group + n / q_tiles_n; };
  auto step_row0 = [&](int n) { return (at.tile + n % q_tiles_n) * kTile; };
  auto row_base = [&](const float* x, int n) { return x + (static_cast<long>(at.batch) * s.h + step_head(n)) * s.t; };
  auto issue_step = [&](int n) {
    const int buf = n & 1, r0 = step_row0(n);
    issue_tile<T, D>(q_tiles + buf * kTile * kLd<D>, head_base(q, s, at.batch, s.h, step_head(n)), r0, s.t, q_stride);
    issue_tile<T, D>(do_tiles + buf * kTile * kLd<D>, head_base(dout, s, at.batch, s.h, step_head(n)), r0, s.t,
                     q_stride);
    issue_rows(lse_s + buf * kTile, row_base(lse, n), r0, s.t);
    issue_rows(delta_s + buf * kTile, row_base(delta, n), r0, s.t);
  };

  issue_tile<T, D>(k_tile, head_base(k, s, at.batch, s.kvh, at.head), k0, s.t, kv_stride);
  issue_tile<T, D>(v_tile, head_base(v, s, at.batch, s.kvh, at.head), k0, s.t, kv_stride);
  issue_step(0);
  cp_async_commit();
  Acc dk_acc[D / 8], dv_acc[D / 8];
  zero(dk_acc);
  zero(dv_acc);
  for (int n = 0; n < steps; ++n) {
    if (n + 1 < steps) issue_step(n + 1);  // into the buffer step n - 1 used, which every warp is done with
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // step n's Q, dO, lse, D (and K, V) landed
    const int buf = n & 1, q0 = step_row0(n);
    const T* q_tile = q_tiles + buf * kTile * kLd<D>;
    const T* do_tile = do_tiles + buf * kTile * kLd<D>;
    const float* lse_b = lse_s + buf * kTile;
    const float* delta_b = delta_s + buf * kTile;
    const bool diagonal = q0 == k0, last = q0 + kTile >= s.t;
    // 32 queries at a time, to keep the score fragments' registers beside dK's and dV's.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      Acc st[4], dpt[4];
      zero(st);
      zero(dpt);
      mul_abt<T, D, 4>(st, k_tile, warp * 16, q_tile, half * 32);
      mul_abt<T, D, 4>(dpt, v_tile, warp * 16, do_tile, half * 32);
#pragma unroll
      for (int nn = 0; nn < 4; ++nn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = warp * 16 + g + (e >> 1) * 8, col = half * 32 + nn * 8 + 2 * c + (e & 1);
          float p = exp2f(st[nn][e] * scale_log2 - lse_b[col] * kLog2e);
          // Causal mask on the diagonal tile only (key after query); queries past T (zero lse,
          // zero Q) are dropped on the last tile.
          if ((diagonal && key > col) || (last && q0 + col >= s.t)) p = 0.0f;
          st[nn][e] = p;
          dpt[nn][e] = p * (dpt[nn][e] - delta_b[col]);
        }
      unsigned pa[2][4], dsa[2][4];
      to_a<T>(pa, st);
      to_a<T>(dsa, dpt);
      mul_ab_acc<T, D, 2>(dv_acc, pa, do_tile, half * 32);
      mul_ab_acc<T, D, 2>(dk_acc, dsa, q_tile, half * 32);
    }
    __syncthreads();  // every warp is done with this step's buffer
  }
  cp_async_wait<0>();
  const float one[2] = {1.0f, 1.0f};
  store_rows<T, D>(head_base(dk, s, at.batch, s.kvh, at.head), kv_stride, k0 + warp * 16, s.t, dk_acc, one, scale,
                   k_tile + warp * 16 * kLd<D>);
  store_rows<T, D>(head_base(dv, s, at.batch, s.kvh, at.head), kv_stride, k0 + warp * 16, s.t, dv_acc, one, 1.0f,
                   v_tile + warp * 16 * kLd<D>);
}

template <int D>
constexpr int dq_smem_bytes() {
  return 4 * tile_bytes<D>() + 2 * kTile * 4;
}

// Grid: one block per (query tile, head, sequence). Per key tile: dP = dO V^T, S = Q K^T,
// P = exp(S - lse), dS = P (dP - D), dQ += dS K (times scale at the end). V_{j+1} is fetched while
// the scores and dQ use K_j, and K_{j+1} while the next dP runs.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dq_tc_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                 AttentionShape s, int tiles, float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* do_tile = q_tile + kTile * kLd<D>;
  T* k_tile = do_tile + kTile * kLd<D>;
  T* v_tile = k_tile + kTile * kLd<D>;
  float* lse_s = reinterpret_cast<float*>(v_tile + kTile * kLd<D>);
  float* delta_s = lse_s + kTile;

  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4, q0 = at.tile * kTile;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  const T* k_head = head_base(k, s, at.batch, s.kvh, kv_head);
  const T* v_head = head_base(v, s, at.batch, s.kvh, kv_head);
  const long row_offset = (static_cast<long>(at.batch) * s.h + at.head) * s.t;

  // cp.async groups: {Q, dO, lse, D, V_0}, {K_0}, then per key tile {V_j+1}, {K_j+1}.
  issue_tile<T, D>(q_tile, head_base(q, s, at.batch, s.h, at.head), q0, s.t, q_stride);
  issue_tile<T, D>(do_tile, head_base(dout, s, at.batch, s.h, at.head), q0, s.t, q_stride);
  issue_rows(lse_s, lse + row_offset, q0, s.t);
  issue_rows(delta_s, delta + row_offset, q0, s.t);
  issue_tile<T, D>(v_tile, v_head, 0, s.t, kv_stride);
  cp_async_commit();
  issue_tile<T, D>(k_tile, k_head, 0, s.t, kv_stride);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();  // Q, dO, lse, D landed
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_lse[i] = lse_s[warp * 16 + g + 8 * i] * kLog2e;
    row_delta[i] = delta_s[warp * 16 + g + 8 * i];
  }
  Acc acc[D / 8];
  zero(acc);
  for (int j = 0; j <= at.tile; ++j) {
    cp_async_wait<1>();
    __syncthreads();  // V_j landed
    Acc dp[kTile / 8];
    zero(dp);
    mul_abt<T, D, kTile / 8>(dp, do_tile, warp * 16, v_tile, 0);
    __syncthreads();  // every warp is done with V_j
    if (j < at.tile) issue_tile<T, D>(v_tile, v_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // K_j landed
    Acc sc[kTile / 8];
    zero(sc);
    mul_abt<T, D, kTile / 8>(sc, q_tile, warp * 16, k_tile, 0);
    const bool diagonal = j == at.tile;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n * 8 + 2 * c + (e & 1), query = warp * 16 + g + (e >> 1) * 8;
        float p = exp2f(sc[n][e] * scale_log2 - row_lse[e >> 1]);
        if (diagonal && key > query) p = 0.0f;  // only the diagonal tile has keys after queries
        sc[n][e] = p * (dp[n][e] - row_delta[e >> 1]);
      }
    unsigned ds[kTile / 16][4];
    to_a<T>(ds, sc);
    mul_ab_acc<T, D, kTile / 16>(acc, ds, k_tile, 0);
    __syncthreads();  // every warp is done with K_j
    if (j < at.tile) issue_tile<T, D>(k_tile, k_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
  }
  cp_async_wait<0>();
  const float one[2] = {1.0f, 1.0f};
  store_rows<T, D>(head_base(dq, s, at.batch, s.h, at.head), q_stride, q0 + warp * 16, s.t, acc, one, scale,
                   q_tile + warp * 16 * kLd<D>);
}

// D[b, h, t] = sum_i dO[b, t, h, i] O[b, t, h, i] in fp32: one warp per (b, t, h) row.
template <class T>
__global__ void row_dot_kernel(float* delta, const T* dout, const T* out, AttentionShape s) {
  const long row = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= static_cast<long>(s.b) * s.t * s.h) return;  // warp-uniform
  float acc = 0.0f;
  for (int i = threadIdx.x % 32; i < s.d; i += 32) acc = fmaf(to_float(dout[row * s.d + i]), to_float(out[row * s.d + i]), acc);
  acc = warp_sum(acc);
  const int h = static_cast<int>(row % s.h);
  const long bt = row / s.h;
  if (threadIdx.x % 32 == 0) delta[(bt / s.t * s.h + h) * s.t + bt % s.t] = acc;
}

// ---------------------------------------------------------------------------------------------
// Host side.

void validate(const AttentionShape& s) {
  if (s.b < 0 || s.t < 0 || s.h <= 0 || s.kvh <= 0 || s.h % s.kvh != 0 || s.d <= 0 || s.d > kMaxHeadDim)
    throw std::invalid_argument("flash_attention: unsupported shape (b " + std::to_string(s.b) + ", t " +
                                std::to_string(s.t) + ", h " + std::to_string(s.h) + ", kvh " + std::to_string(s.kvh) +
                                ", d " + std::to_string(s.d) + "); needs h % kvh == 0 and 0 < d <= 256");
}

// The tensor-core kernels copy rows 16 bytes at a time.
template <class T>
bool use_tensor_cores(const AttentionShape& s, std::initializer_list<const void*> pointers) {
  if (std::is_same_v<T, float> || (s.d != 64 && s.d != 128)) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}



template <class T, int D>
void forward_tensor_cores(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, float scale_log2) {
  constexpr int smem = fwd_smem_bytes<D>();
  const int tiles = ceil_div(s.t, kTile);
  allow_smem(fwd_tc_kernel<T, D>, smem);
  fwd_tc_kernel<T, D><<<grid_blocks(tiles, s.h, s.b), kThreads, smem, stream()>>>(out, lse, q, k, v, s, tiles, scale_log2);
  check_launch("flash_attention_forward (tensor cores)");
}

template <class T, int D>
void backward_tensor_cores(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                           const float* delta, AttentionShape s, float scale_log2, float scale) {
  const int tiles = ceil_div(s.t, kTile);
  allow_smem(dkv_tc_kernel<T, D>, dkv_smem_bytes<D>());
  dkv_tc_kernel<T, D><<<grid_blocks(tiles, s.kvh, s.b), kThreads, dkv_smem_bytes<D>(), stream()>>>(
      dk, dv, dout, q, k, v, lse, delta, s, tiles, scale_log2, scale);
  check_launch("flash_attention_backward dK/dV (tensor cores)");
  allow_smem(dq_tc_kernel<T, D>, dq_smem_bytes<D>());
  dq_tc_kernel<T, D><<<grid_blocks(tiles, s.h, s.b), kThreads, dq_smem_bytes<D>(), stream()>>>(
      dq, dout, q, k, v, lse, delta, s, tiles, scale_log2, scale);
  check_launch("flash_attention_backward dQ (tensor cores)");
}


}  // namespace

template <class T>
void flash_attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s) {
  validate(s);
  if (s.b == 0 || s.t == 0) return;
  const float scale_log2 = (1.0f / std::sqrt(static_cast<float>(s.d))) * kLog2e;  // as the backward's
  if constexpr (!std::is_same_v<T, float>) {
    if (use_tensor_cores<T>(s, {out, q, k, v})) {
      if (s.d == 64) return forward_tensor_cores<T, 64>(out, lse, q, k, v, s, scale_log2);
      return forward_tensor_cores<T, 128>(out, lse, q, k, v, s, scale_log2);
    }
  }
  forward_fallback<T>(out, lse, q, k, v, s, scale_log2);
}

template <class T>
void flash_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                              const float* lse, AttentionShape s) {
  validate(s);
  if (s.b == 0 || s.t == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d)), scale_log2 = scale * kLog2e;
  const long rows = static_cast<long>(s.b) * s.t * s.h;
  detail::Scratch<float> delta_scratch(rows);  // [B, H, T], O(T); freed on the stream however we leave
  float* delta = delta_scratch.get();
  constexpr int kRowsPerBlock = 8;
  row_dot_kernel<T><<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0,
                      stream()>>>(delta, dout, out, s);
  check_launch("flash_attention_backward D = rowsum(dO * O)");
  bool done = false;
  if constexpr (!std::is_same_v<T, float>) {
    if (use_tensor_cores<T>(s, {dq, dk, dv, dout, q, k, v})) {
      if (s.d == 64)
        backward_tensor_cores<T, 64>(dq, dk, dv, dout, q, k, v, lse, delta, s, scale_log2, scale);
      else
        backward_tensor_cores<T, 128>(dq, dk, dv, dout, q, k, v, lse, delta, s, scale_log2, scale);
      done = true;
    }
  }
  if (!done) backward_fallback<T>(dq, dk, dv, dout, q, k, v, lse, delta, s, scale_log2, scale);
}

#define PARALLAX_INSTANTIATE_FLASH_ATTENTION(T)                                                                     \
  template void flash_attention_forward<T>(T*, float*, const T*, const T*, const T*, AttentionShape);               \
  template void flash_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const float*, \
                                            AttentionShape);
PARALLAX_INSTANTIATE_FLASH_ATTENTION(float)
PARALLAX_INSTANTIATE_FLASH_ATTENTION(bf16)
PARALLAX_INSTANTIATE_FLASH_ATTENTION(fp16)
#undef PARALLAX_INSTANTIATE_FLASH_ATTENTION

}  // namespace parallax::kernels::cuda
