// Private to kernels/cuda/attention.cu: the tensor-core path's building blocks — mma.sync
// m16n8k16 fragments loaded with ldmatrix, the products the kernels chain, the tile copies and
// stores, and the online softmax on register fragments. attention.cu holds the kernels.
#pragma once

#include <type_traits>

#include "kernels/cuda/attention_internal.cuh"

namespace parallax::kernels::cuda::attention_mma {

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
__device__ inline void issue_rows(float* dst, const float* src, int row0, int t_len) {
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

}  // namespace parallax::kernels::cuda::attention_mma
