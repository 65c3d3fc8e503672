// CUDA fused causal attention (kernels/cuda/attention.h), FlashAttention-2's algorithm. The forward
// streams key tiles past a tile of queries with an online softmax; the backward is three launches,
// all deterministic: D = rowsum(dO * O), then dK and dV parallel over key tiles, then dQ parallel
// over query tiles (recomputing P instead of adding dQ atomically). Two implementations: tensor
// cores (mma.sync m16n8k16, fp32 accumulators, scores and probabilities kept in registers) for
// bf16 / fp16 with head_dim 64 or 128, and an fp32 CUDA-core fallback for fp32 storage, any other
// head_dim up to 256 or unaligned pointers.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.cuh"
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

// ---------------------------------------------------------------------------------------------
// Tensor-core path (bf16 / fp16, head_dim 64 or 128).
//
// A block is 4 warps owning a 64-row tile (queries in the forward and dQ kernels, keys in the
// dK/dV kernel), 16 rows per warp, so row-wise work (softmax bookkeeping, masks, accumulators)
// never crosses warps and block barriers guard only the streamed tiles; the other side streams
// through in 64-row tiles. Products are PTX mma.sync m16n8k16 on fragments loaded from shared
// memory with ldmatrix. The accumulator layout of one product is the A-operand layout of the next
// (FlashAttention-2's observation), so S = Q K^T becomes P and feeds P V without leaving
// registers, and likewise P^T, dS and dS^T in the backward: shared memory holds only the
// operand tiles.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + c:
//   A (16 x 16, row-major): a[0] = A[g][2c, 2c+1], a[1] = A[g+8][2c, 2c+1], a[2] = A[g][8+2c, 9+2c],
//     a[3] = A[g+8][8+2c, 9+2c] (two 16-bit values per register, the lower column in the low half);
//   B (16 x 8): b[0] = B[2c, 2c+1][g], b[1] = B[8+2c, 9+2c][g];
//   C (16 x 8, fp32): c[0], c[1] = C[g][2c, 2c+1]; c[2], c[3] = C[g+8][2c, 2c+1].
constexpr int kTile = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Shared row stride in elements: 16 bytes of padding put consecutive rows 4 banks apart, so the
// 8 row addresses of one ldmatrix matrix (16 bytes each) and the fragment stores hit distinct banks.
template <int D>
constexpr int kLd = D + 8;
template <int D>
constexpr int tile_bytes() {
  return kTile * kLd<D> * 2;
}

using Acc = float[4];  // one 16 x 8 fp32 accumulator fragment

__device__ inline unsigned smem_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// Four 8 x 8 matrices of 16-bit values; lanes 8i .. 8i + 7 give the row addresses of matrix i.
__device__ inline void ldsm_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
__device__ inline void ldsm_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// c += a b (16 x 16 by 16 x 8).
template <class T>
__device__ inline void mma(Acc& c, const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// This lane's ldmatrix row address for the A fragment of rows [r0, r0 + 16) x columns [k0, k0 + 16)
// of a row-major tile: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <int D, class T>
__device__ inline const T* a_row(const T* tile, int r0, int k0) {
  const int lane = threadIdx.x % 32;
  return tile + (r0 + (lane & 15)) * kLd<D> + k0 + (lane >> 4) * 8;
}
// B fragments of two 8-column n-tiles for B = X^T, X row-major with rows [n0, n0 + 16) and
// columns [k0, k0 + 16): r[0], r[1] serve n-tile n0, r[2], r[3] n-tile n0 + 8.
template <int D, class T>
__device__ inline const T* bt_row(const T* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  return tile + (n0 + (lane >> 4) * 8 + (lane & 7)) * kLd<D> + k0 + ((lane >> 3) & 1) * 8;
}
// B fragments of two n-tiles for B = X, X row-major with rows [k0, k0 + 16) and columns
// [n0, n0 + 16), loaded transposed: r[0], r[1] serve n-tile n0, r[2], r[3] n-tile n0 + 8.
template <int D, class T>
__device__ inline const T* b_row(const T* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  return tile + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kLd<D> + n0 + (lane >> 4) * 8;
}

template <int N>
__device__ inline void zero(Acc (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// acc (16 x 8N) += A X^T over columns [0, D): A is rows [a0, a0 + 16) of tile `a`, X rows
// [x0, x0 + 8N) of tile `x` (both D wide).
template <class T, int D, int N>
__device__ void mul_abt(Acc (&acc)[N], const T* a, int a0, const T* x, int x0) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    unsigned fa[4];
    ldsm_x4(fa, a_row<D>(a, a0, kk * 16));
#pragma unroll
    for (int n = 0; n < N / 2; ++n) {
      unsigned fb[4];
      ldsm_x4(fb, bt_row<D>(x, x0 + n * 16, kk * 16));
      mma<T>(acc[2 * n], fa, fb[0], fb[1]);
      mma<T>(acc[2 * n + 1], fa, fb[2], fb[3]);
    }
  }
}

// acc (16 x D) += P X: P is 16 x 16K given as K A-fragments (registers), X rows [x0, x0 + 16K)
// of tile `x`.
template <class T, int D, int K>
__device__ void mul_ab_acc(Acc (&acc)[D / 8], const unsigned (&p)[K][4], const T* x, int x0) {
#pragma unroll
  for (int kk = 0; kk < K; ++kk)
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      unsigned fb[4];
      ldsm_x4_trans(fb, b_row<D>(x, x0 + kk * 16, n * 16));
      mma<T>(acc[2 * n], p[kk], fb[0], fb[1]);
      mma<T>(acc[2 * n + 1], p[kk], fb[2], fb[3]);
    }
}

// Accumulator n-tiles 2k and 2k + 1 (16 x 16) as the A fragment of columns [16k, 16k + 16).
template <class T, int N>
__device__ inline void to_a(unsigned (&a)[N / 2][4], const Acc (&c)[N]) {
#pragma unroll
  for (int k = 0; k < N / 2; ++k) {
    a[k][0] = pack2<T>(c[2 * k][0], c[2 * k][1]);
    a[k][1] = pack2<T>(c[2 * k][2], c[2 * k][3]);
    a[k][2] = pack2<T>(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = pack2<T>(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

// Issues the copy of rows [row0, row0 + 64) of one head into a 64 x D shared tile. Rows at or past
// T are zero: masked probabilities are 0, but 0 times uninitialised shared memory can be NaN.
template <class T, int D>
__device__ void issue_tile(T* tile, const T* head, int row0, int t_len, long row_stride) {
  constexpr int kChunks = D * 2 / 16;  // 16-byte copies per row
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < t_len;
    cp_async16(tile + r * kLd<D> + c * 8, head + (valid ? (row0 + r) * row_stride : 0) + c * 8, valid);
  }
}
// 64 per-row floats (lse or D) of rows [row0, row0 + 64); zero past T.
__device__ void issue_rows(float* dst, const float* src, int row0, int t_len) {
  if (threadIdx.x < kTile) {
    const bool valid = row0 + static_cast<int>(threadIdx.x) < t_len;
    cp_async4(dst + threadIdx.x, src + (valid ? row0 + threadIdx.x : 0), valid);
  }
}

// Writes a warp's 16 x D accumulator, times `scale` (rows g and g + 8 also by row_factor[0] and
// [1]), into `stage` (16 rows of a tile this warp alone reads, free by then) and copies the rows
// before t_len to global memory 16 bytes at a time.
template <class T, int D>
__device__ void store_rows(T* head, long row_stride, int row0, int t_len, const Acc (&acc)[D / 8],
                           const float (&row_factor)[2], float scale, T* stage) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const float f0 = scale * row_factor[0], f1 = scale * row_factor[1];
  __syncwarp();  // the warp's last ldmatrix of `stage` is behind every lane
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<unsigned*>(stage + g * kLd<D> + n * 8 + 2 * c) = pack2<T>(acc[n][0] * f0, acc[n][1] * f0);
    *reinterpret_cast<unsigned*>(stage + (g + 8) * kLd<D> + n * 8 + 2 * c) = pack2<T>(acc[n][2] * f1, acc[n][3] * f1);
  }
  __syncwarp();
  constexpr int kChunks = D * 2 / 16;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, k = i % kChunks;
    if (row0 + r < t_len)
      reinterpret_cast<uint4*>(head + (row0 + r) * row_stride)[k] = reinterpret_cast<const uint4*>(stage + r * kLd<D>)[k];
  }
}

// The maximum over the four lanes that share a row (lanes 4g .. 4g + 3).
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One online-softmax step for this lane's two rows (g and g + 8 of the warp's 16) over a 64-key
// tile of raw scores: scales them to log2 units, masks keys after query (on the diagonal tile,
// `row` is the warp's first query relative to the tile's first key; -1 for no mask), replaces them
// by P = exp2(s - m_new) and returns each row's rescale factor exp2(m_old - m_new) (0 on the first
// tile, where m_old = -inf). The running sum l stays per lane (its 16 columns) until the end.
__device__ inline void softmax_update(Acc (&sc)[kTile / 8], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                      float scale_log2, int row) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = n * 8 + 2 * c + (e & 1), query = row + g + (e >> 1) * 8;
      const float x = row >= 0 && key > query ? -INFINITY : sc[n][e] * scale_log2;
      sc[n][e] = x;
      tile_max[e >> 1] = fmaxf(tile_max[e >> 1], x);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // Finite: every row's first key tile holds key 0, which no query masks.
    const float m_new = fmaxf(m[i], quad_max(tile_max[i]));
    alpha[i] = exp2f(m[i] - m_new);
    m[i] = m_new;
    l[i] *= alpha[i];
  }
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sc[n][e] = exp2f(sc[n][e] - m[e >> 1]);
      l[e >> 1] += sc[n][e];
    }
}

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
