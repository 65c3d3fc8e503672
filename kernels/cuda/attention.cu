// CUDA fused causal attention (kernels/cuda/attention.h), FlashAttention-2's algorithm. The forward
// streams key tiles past a tile of queries with an online softmax; the backward is three launches,
// all deterministic: D = rowsum(dO * O), then dK and dV parallel over key tiles, then dQ parallel
// over query tiles (recomputing P instead of adding dQ atomically). Two implementations: tensor
// cores (nvcuda::wmma 16x16x16, fp32 accumulators) for bf16 / fp16 with head_dim 64 or 128, and an
// fp32 CUDA-core fallback for fp32 storage, any other head_dim up to 256 or unaligned pointers.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/device_utils.cuh"

#include <mma.h>

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

namespace wmma = nvcuda::wmma;

// ---------------------------------------------------------------------------------------------
// Tensor-core path (bf16 / fp16, head_dim 64 or 128).
//
// A block is 4 warps owning a 64-row tile (queries in the forward and dQ kernels, keys in the
// dK/dV kernel), 16 rows per warp, so row-wise work (softmax bookkeeping, masks, accumulators)
// never crosses warps and block barriers guard only the streamed tiles. The other side streams
// through in 64-row tiles. 64 x 64 is what the budget allows: a 64 x D operand tile is 17 KiB at
// D = 128, the kernels hold 3 or 4 of them plus 9-26 KiB of score tiles (77-87 KiB at D = 128,
// 46-55 KiB at D = 64), so two blocks share an SM at D = 128 (228 KiB on H100, 164 KiB on A100)
// and three or four at D = 64; and a warp's 16 x D fp32 accumulator is D / 16 fragments, 64
// registers per lane at D = 128 (128 for dK + dV), which leaves room below 255 without spills.
constexpr int kTile = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Shared row strides in elements. 16-bit operand rows get 16 bytes of padding so consecutive rows
// start 4 banks apart and fragment loads (8 rows x 16 bytes) are conflict-free; wmma wants strides
// that are multiples of 16 bytes and fragment pointers 32-byte aligned, which these keep.
template <int D>
constexpr int kLdOperand = D + 8;
constexpr int kLdP = kTile + 8;  // 16-bit P and dS tiles
constexpr int kLdS = kTile + 4;  // fp32 score tile (forward)
template <int D>
constexpr int operand_tile_bytes() {
  return kTile * kLdOperand<D> * 2;
}

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Where element e of this lane's accumulator fragments sits in its 16 x 16 tile. The API leaves
// the layout unspecified but it is fixed for the fragment type, and load_matrix_sync, mma_sync and
// store_matrix_sync agree on it (C of D = A B + C is loaded), so loading a tile whose entries are
// their own coordinates reveals it. With it, masks, per-row lse / D and the online-softmax rescale
// run on registers, and results go to shared memory in any element type.
struct FragCoords {
  int rc[Acc::num_elements];  // row * 16 + col
  __device__ int row(int e) const { return rc[e] >> 4; }
  __device__ int col(int e) const { return rc[e] & 15; }
};
// scratch: 256 floats of this warp's shared memory, free at the time of the call.
__device__ FragCoords frag_coords(float* scratch) {
  for (int i = threadIdx.x % 32; i < 256; i += 32) scratch[i] = static_cast<float>(i);
  __syncwarp();
  Acc f;
  wmma::load_matrix_sync(f, scratch, 16, wmma::mem_row_major);
  __syncwarp();
  FragCoords fc;
#pragma unroll
  for (int e = 0; e < Acc::num_elements; ++e) fc.rc[e] = static_cast<int>(f.x[e]);
  return fc;
}

// Issues the copy of rows [row0, row0 + 64) of one head into a 64 x D shared tile. Rows at or past
// T are zero: masked probabilities are 0, but 0 times uninitialised shared memory can be NaN.
template <class T, int D>
__device__ void issue_tile(T* tile, const T* head, int row0, int t_len, long row_stride) {
  constexpr int kChunks = D * 2 / 16;  // 16-byte copies per row
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < t_len;
    cp_async16(tile + r * kLdOperand<D> + c * 8, head + (valid ? (row0 + r) * row_stride : 0) + c * 8, valid);
  }
}
// 64 per-row floats (lse or D) of rows [row0, row0 + 64); zero past T.
__device__ void issue_rows(float* dst, const float* src, int row0, int t_len) {
  if (threadIdx.x < kTile) {
    const bool valid = row0 + static_cast<int>(threadIdx.x) < t_len;
    cp_async4(dst + threadIdx.x, src + (valid ? row0 + threadIdx.x : 0), valid);
  }
}

// acc[n] = A B_n^T, n < N: A is this warp's 16 x D rows, B_n rows 16n .. 16n + 15 of a D-wide
// tile (both row-major, stride kLdOperand), i.e. the 16 x 16N block of A B^T.
template <class T, int D, int N>
__device__ void mul_abt(Acc (&acc)[N], const T* a, const T* b) {
  constexpr int ld = kLdOperand<D>;
#pragma unroll
  for (int n = 0; n < N; ++n) wmma::fill_fragment(acc[n], 0.0f);
  // The k loop stays rolled (indices into acc[] stay compile-time): unrolled, the compiler hoists
  // every fragment load of the product, reaches 255 registers and spills.
#pragma unroll 1
  for (int kk = 0; kk < D / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + kk * 16, ld);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      FragBCol<T> fb;
      wmma::load_matrix_sync(fb, b + n * 16 * ld + kk * 16, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// acc (16 x D) += A B: A is this warp's 16 x 64 P or dS tile (stride kLdP), B a 64 x D tile.
template <class T, int D>
__device__ void mul_ab_acc(Acc (&acc)[D / 16], const T* a, const T* b) {
  constexpr int ld = kLdOperand<D>;
#pragma unroll 1  // as in mul_abt
  for (int kk = 0; kk < kTile / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + kk * 16, kLdP);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * ld + n * 16, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x D result, times scale and row_factor[row] when given, into `stage` (the
// warp's 16 rows of an operand tile it alone reads, free by then) and copies the rows before t_len
// to global memory 16 bytes at a time.
template <class T, int D>
__device__ void store_rows(T* head, long row_stride, int row0, int t_len, const Acc (&acc)[D / 16],
                           const float* row_factor, float scale, T* stage, const FragCoords& fc) {
  constexpr int ld = kLdOperand<D>;
#pragma unroll
  for (int e = 0; e < Acc::num_elements; ++e) {
    const float f = row_factor ? scale * row_factor[fc.row(e)] : scale;
#pragma unroll
    for (int n = 0; n < D / 16; ++n) stage[fc.row(e) * ld + n * 16 + fc.col(e)] = from_float<T>(acc[n].x[e] * f);
  }
  __syncwarp();
  constexpr int kChunks = D * 2 / 16;
  for (int i = threadIdx.x % 32; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (row0 + r < t_len)
      reinterpret_cast<uint4*>(head + (row0 + r) * row_stride)[c] = reinterpret_cast<const uint4*>(stage + r * ld)[c];
  }
}

// One online-softmax step for this warp's 16 query rows and a 64-key tile of fp32 scores. Lanes l
// and l ^ 16 share row l & 15 (columns 0-31 and 32-63) and keep identical running max m (log2
// units) and sum l. Columns >= valid_cols are masked. Writes P = exp2(s - m_new) as T and the row's
// rescale factor exp2(m_old - m_new) (0 on the first tile, where m_old = -inf). The score rows are
// read 16 bytes at a time: a quarter-warp (rows r .. r + 7, stride 68 = 4 mod 32 words) then covers
// all 32 banks once.
template <class T>
__device__ void softmax_update(const float* s_warp, T* p_warp, float* row_factor, float& m, float& l,
                               float scale_log2, int valid_cols) {
  const int lane = threadIdx.x % 32, row = lane & 15, half = lane >> 4;
  const float4* srow = reinterpret_cast<const float4*>(s_warp + row * kLdS + half * 32);
  uint2* prow = reinterpret_cast<uint2*>(p_warp + row * kLdP + half * 32);
  float x[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v4 = srow[i];
    x[4 * i] = v4.x, x[4 * i + 1] = v4.y, x[4 * i + 2] = v4.z, x[4 * i + 3] = v4.w;
  }
  float tile_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    x[i] = half * 32 + i < valid_cols ? x[i] * scale_log2 : -INFINITY;
    tile_max = fmaxf(tile_max, x[i]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
  // Finite: every row's first key tile holds key 0, which no query masks.
  const float m_new = fmaxf(m, tile_max);
  const float alpha = exp2f(m - m_new);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    x[i] = exp2f(x[i] - m_new);
    sum += x[i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    prow[i] = make_uint2(pack2<T>(x[4 * i], x[4 * i + 1]), pack2<T>(x[4 * i + 2], x[4 * i + 3]));
  sum += __shfl_xor_sync(0xffffffffu, sum, 16);
  l = l * alpha + sum;
  m = m_new;
  if (half == 0) row_factor[row] = alpha;
}

template <int D>
constexpr int fwd_smem_bytes() {
  return 3 * operand_tile_bytes<D>() + kTile * kLdS * 4 + kTile * kLdP * 2 + kTile * 4;
}

// Grid: one block per (query tile, head, sequence). Shared: Q, K, V tiles, fp32 scores, P, and a
// per-row factor. K_{j+1} is fetched while P_j V_j runs and V_{j+1} while the next scores do.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    fwd_tc_kernel(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s, int tiles, float scale_log2) {
  constexpr int ld = kLdOperand<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tile = q_tile + kTile * ld;
  T* v_tile = k_tile + kTile * ld;
  float* s_tile = reinterpret_cast<float*>(v_tile + kTile * ld);
  T* p_tile = reinterpret_cast<T*>(s_tile + kTile * kLdS);
  float* factors = reinterpret_cast<float*>(p_tile + kTile * kLdP);

  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q0 = at.tile * kTile;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  const T* q_head = head_base(q, s, at.batch, s.h, at.head);
  const T* k_head = head_base(k, s, at.batch, s.kvh, kv_head);
  const T* v_head = head_base(v, s, at.batch, s.kvh, kv_head);
  float* s_warp = s_tile + warp * 16 * kLdS;
  T* p_warp = p_tile + warp * 16 * kLdP;
  float* factor_warp = factors + warp * 16;

  // cp.async groups, in order: {Q, K_0}, {V_0}, then per key tile {K_j+1}, {V_j+1} (empty past the
  // last tile), so "all but the newest group" is always the tile needed next.
  issue_tile<T, D>(q_tile, q_head, q0, s.t, q_stride);
  issue_tile<T, D>(k_tile, k_head, 0, s.t, kv_stride);
  cp_async_commit();
  issue_tile<T, D>(v_tile, v_head, 0, s.t, kv_stride);
  cp_async_commit();
  const FragCoords fc = frag_coords(s_warp);
  Acc o[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o[n], 0.0f);
  float m = -INFINITY, l = 0.0f;
  // Causal: key tiles after the query tile are skipped entirely.
  for (int j = 0; j <= at.tile; ++j) {
    cp_async_wait<1>();
    __syncthreads();  // K_j (and Q) landed
    {
      Acc sc[kTile / 16];
      mul_abt<T, D, kTile / 16>(sc, q_tile + warp * 16 * ld, k_tile);
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n) wmma::store_matrix_sync(s_warp + n * 16, sc[n], kLdS, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with K_j
    if (j < at.tile) issue_tile<T, D>(k_tile, k_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
    // Every key of an earlier tile precedes every query of this one, so only the diagonal tile
    // (j == tile, keys and queries at the same offsets) needs a mask: row r keeps columns <= r.
    const int valid_cols = j == at.tile ? warp * 16 + (lane & 15) + 1 : kTile;
    softmax_update(s_warp, p_warp, factor_warp, m, l, scale_log2, valid_cols);
    cp_async_wait<1>();
    __syncthreads();  // V_j landed; P and the factors are visible
#pragma unroll
    for (int e = 0; e < Acc::num_elements; ++e) {
      const float alpha = factor_warp[fc.row(e)];
#pragma unroll
      for (int n = 0; n < D / 16; ++n) o[n].x[e] *= alpha;
    }
    mul_ab_acc<T, D>(o, p_warp, v_tile);
    __syncthreads();  // every warp is done with V_j
    if (j < at.tile) issue_tile<T, D>(v_tile, v_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
  }
  cp_async_wait<0>();
  if (lane < 16) {
    factor_warp[lane] = 1.0f / l;
    const int t = q0 + warp * 16 + lane;
    if (t < s.t) lse[(static_cast<long>(at.batch) * s.h + at.head) * s.t + t] = (m + log2f(l)) * kLn2;
  }
  __syncwarp();
  store_rows<T, D>(head_base(out, s, at.batch, s.h, at.head), q_stride, q0 + warp * 16, s.t, o, factor_warp, 1.0f,
                   q_tile + warp * 16 * ld, fc);
}

template <int D>
constexpr int dkv_smem_bytes() {
  return 4 * operand_tile_bytes<D>() + 2 * kTile * kLdP * 2 + 2 * kTile * 4;
}

// Grid: one block per (key tile, KV head, sequence); it visits every (query head of the KV head's
// group, query tile at or after the key tile) in order, so GQA's sum over the group happens in
// registers, deterministically. Per step: P^T = exp(K Q^T - lse), dP^T = V dO^T,
// dS^T = P^T (dP^T - D); dV += P^T dO; dK += dS^T Q (times scale at the end).
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dkv_tc_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                  AttentionShape s, int tiles, float scale_log2, float scale) {
  constexpr int ld = kLdOperand<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = k_tile + kTile * ld;
  T* q_tile = v_tile + kTile * ld;
  T* do_tile = q_tile + kTile * ld;
  T* pt_tile = do_tile + kTile * ld;
  T* dst_tile = pt_tile + kTile * kLdP;
  float* lse_s = reinterpret_cast<float*>(dst_tile + kTile * kLdP);
  float* delta_s = lse_s + kTile;

  const TileIndex at = tile_index(s.kvh, s.b, tiles, false);  // early key tiles see the most queries
  const int warp = threadIdx.x / 32, k0 = at.tile * kTile, group = s.h / s.kvh;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int q_tiles = tiles - at.tile, steps = group * q_tiles;
  T* pt_warp = pt_tile + warp * 16 * kLdP;
  T* dst_warp = dst_tile + warp * 16 * kLdP;
  auto step_head = [&](int n) { return at.head * group + n / q_tiles; };
  auto step_row0 = [&](int n) { return (at.tile + n % q_tiles) * kTile; };
  auto lse_row = [&](const float* x, int n) { return x + (static_cast<long>(at.batch) * s.h + step_head(n)) * s.t; };

  issue_tile<T, D>(k_tile, head_base(k, s, at.batch, s.kvh, at.head), k0, s.t, kv_stride);
  issue_tile<T, D>(v_tile, head_base(v, s, at.batch, s.kvh, at.head), k0, s.t, kv_stride);
  issue_tile<T, D>(q_tile, head_base(q, s, at.batch, s.h, step_head(0)), step_row0(0), s.t, q_stride);
  issue_tile<T, D>(do_tile, head_base(dout, s, at.batch, s.h, step_head(0)), step_row0(0), s.t, q_stride);
  issue_rows(lse_s, lse_row(lse, 0), step_row0(0), s.t);
  issue_rows(delta_s, lse_row(delta, 0), step_row0(0), s.t);
  cp_async_commit();
  const FragCoords fc = frag_coords(reinterpret_cast<float*>(pt_warp));
  Acc dk_acc[D / 16], dv_acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  for (int n = 0; n < steps; ++n) {
    const int q0 = step_row0(n);
    const bool diagonal = q0 == k0, last = q0 + kTile >= s.t;
    cp_async_wait<0>();
    __syncthreads();  // this step's Q, dO, lse, D landed
    // 32 queries at a time, to keep the score fragments' registers beside dK's and dV's.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      Acc st[2], dpt[2];
      mul_abt<T, D, 2>(st, k_tile + warp * 16 * ld, q_tile + half * 32 * ld);
      mul_abt<T, D, 2>(dpt, v_tile + warp * 16 * ld, do_tile + half * 32 * ld);
#pragma unroll
      for (int nn = 0; nn < 2; ++nn)
#pragma unroll
        for (int e = 0; e < Acc::num_elements; ++e) {
          const int r = fc.row(e), c = half * 32 + nn * 16 + fc.col(e);
          float p = exp2f(st[nn].x[e] * scale_log2 - lse_s[c] * kLog2e);
          // Causal mask on the diagonal tile only (key 16 warp + r after query c); queries past T
          // (zero lse, zero Q) are dropped on the last tile.
          if ((diagonal && warp * 16 + r > c) || (last && q0 + c >= s.t)) p = 0.0f;
          pt_warp[r * kLdP + c] = from_float<T>(p);
          dst_warp[r * kLdP + c] = from_float<T>(p * (dpt[nn].x[e] - delta_s[c]));
        }
    }
    __syncwarp();
    mul_ab_acc<T, D>(dv_acc, pt_warp, do_tile);
    __syncthreads();  // every warp is done with dO, lse and D
    if (n + 1 < steps) {
      issue_tile<T, D>(do_tile, head_base(dout, s, at.batch, s.h, step_head(n + 1)), step_row0(n + 1), s.t, q_stride);
      issue_rows(lse_s, lse_row(lse, n + 1), step_row0(n + 1), s.t);
      issue_rows(delta_s, lse_row(delta, n + 1), step_row0(n + 1), s.t);
    }
    mul_ab_acc<T, D>(dk_acc, dst_warp, q_tile);
    __syncthreads();  // every warp is done with Q
    if (n + 1 < steps)
      issue_tile<T, D>(q_tile, head_base(q, s, at.batch, s.h, step_head(n + 1)), step_row0(n + 1), s.t, q_stride);
    cp_async_commit();
  }
  cp_async_wait<0>();
  store_rows<T, D>(head_base(dk, s, at.batch, s.kvh, at.head), kv_stride, k0 + warp * 16, s.t, dk_acc, nullptr, scale,
                   k_tile + warp * 16 * ld, fc);
  store_rows<T, D>(head_base(dv, s, at.batch, s.kvh, at.head), kv_stride, k0 + warp * 16, s.t, dv_acc, nullptr, 1.0f,
                   v_tile + warp * 16 * ld, fc);
}

template <int D>
constexpr int dq_smem_bytes() {
  return 4 * operand_tile_bytes<D>() + kTile * kLdP * 2 + 2 * kTile * 4;
}

// Grid: one block per (query tile, head, sequence). Per key tile: dP = dO V^T, P = exp(Q K^T - lse),
// dS = P (dP - D), dQ += dS K (times scale at the end). V_{j+1} is fetched while the scores and dQ
// use K_j, and K_{j+1} while the next dP runs.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    dq_tc_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                 AttentionShape s, int tiles, float scale_log2, float scale) {
  constexpr int ld = kLdOperand<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* do_tile = q_tile + kTile * ld;
  T* k_tile = do_tile + kTile * ld;
  T* v_tile = k_tile + kTile * ld;
  T* ds_tile = v_tile + kTile * ld;
  float* lse_s = reinterpret_cast<float*>(ds_tile + kTile * kLdP);
  float* delta_s = lse_s + kTile;

  const TileIndex at = tile_index(s.h, s.b, tiles, true);
  const int warp = threadIdx.x / 32, q0 = at.tile * kTile;
  const long q_stride = static_cast<long>(s.h) * s.d, kv_stride = static_cast<long>(s.kvh) * s.d;
  const int kv_head = at.head / (s.h / s.kvh);
  const T* k_head = head_base(k, s, at.batch, s.kvh, kv_head);
  const T* v_head = head_base(v, s, at.batch, s.kvh, kv_head);
  const long row_offset = (static_cast<long>(at.batch) * s.h + at.head) * s.t;
  T* ds_warp = ds_tile + warp * 16 * kLdP;

  // cp.async groups: {Q, dO, lse, D, V_0}, {K_0}, then per key tile {V_j+1}, {K_j+1}.
  issue_tile<T, D>(q_tile, head_base(q, s, at.batch, s.h, at.head), q0, s.t, q_stride);
  issue_tile<T, D>(do_tile, head_base(dout, s, at.batch, s.h, at.head), q0, s.t, q_stride);
  issue_rows(lse_s, lse + row_offset, q0, s.t);
  issue_rows(delta_s, delta + row_offset, q0, s.t);
  issue_tile<T, D>(v_tile, v_head, 0, s.t, kv_stride);
  cp_async_commit();
  issue_tile<T, D>(k_tile, k_head, 0, s.t, kv_stride);
  cp_async_commit();
  const FragCoords fc = frag_coords(reinterpret_cast<float*>(ds_warp));
  Acc acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  for (int j = 0; j <= at.tile; ++j) {
    cp_async_wait<1>();
    __syncthreads();  // V_j (and at j = 0 Q, dO, lse, D) landed
    Acc dp[kTile / 16];
    mul_abt<T, D, kTile / 16>(dp, do_tile + warp * 16 * ld, v_tile);
    __syncthreads();  // every warp is done with V_j
    if (j < at.tile) issue_tile<T, D>(v_tile, v_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // K_j landed
    {
      Acc sc[kTile / 16];
      mul_abt<T, D, kTile / 16>(sc, q_tile + warp * 16 * ld, k_tile);
      const bool diagonal = j == at.tile;
#pragma unroll
      for (int n = 0; n < kTile / 16; ++n)
#pragma unroll
        for (int e = 0; e < Acc::num_elements; ++e) {
          const int r = fc.row(e), c = n * 16 + fc.col(e);
          float p = exp2f(sc[n].x[e] * scale_log2 - lse_s[warp * 16 + r] * kLog2e);
          if (diagonal && c > warp * 16 + r) p = 0.0f;  // only the diagonal tile has keys after queries
          ds_warp[r * kLdP + c] = from_float<T>(p * (dp[n].x[e] - delta_s[warp * 16 + r]));
        }
    }
    __syncwarp();
    mul_ab_acc<T, D>(acc, ds_warp, k_tile);
    __syncthreads();  // every warp is done with K_j
    if (j < at.tile) issue_tile<T, D>(k_tile, k_head, (j + 1) * kTile, s.t, kv_stride);
    cp_async_commit();
  }
  cp_async_wait<0>();
  store_rows<T, D>(head_base(dq, s, at.batch, s.h, at.head), q_stride, q0 + warp * 16, s.t, acc, nullptr, scale,
                   q_tile + warp * 16 * ld, fc);
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
