// Roofline compute cost: how long one GPU of a ClusterSpec takes for a GEMM (FLOPs at the peak
// times a shape-dependent efficiency) or a memory-bound kernel (bytes at HBM bandwidth times an
// efficiency). The analytical step model and the simulator's lowering both price ops here.
#pragma once

#include <string>

#include "models/layer_cost.h"
#include "simulator/cluster_spec.h"

namespace parallax {

// Efficiency of one GEMM shape: max * prod over M, N, K of d / (d + half_dim), times the wave
// quantization of its output tiles (useful tiles / tiles of whole waves; tiles shrink to the
// problem for small dimensions, in steps of 16). A GPU with a measured gemm_grid interpolates it
// instead. Ragged rows (Gemm::m_sd) execute the expected row tiles of their spread. FP8's is its
// fraction of the FP8 peak: the GPU's FP8 curve where it has one, else bf16's efficiency.
double gemm_efficiency(const GpuSpec& gpu, const Gemm& g, Precision p = Precision::kBf16);
double wave_efficiency(const GpuSpec& gpu, const Gemm& g);
// Row tiles of `tile` rows an M of `rows` executes: ceil(rows / tile), or with ragged rows spread
// normally by rows_sd its expectation, the sum over j >= 0 of P(M > j tile) (rows / tile + 1/2
// once the spread reaches a tile).
double expected_tiles(double rows, double rows_sd, int64_t tile);
double gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g);
// The bytes a GEMM's kernel must move through HBM at least once: both inputs (1 byte per element
// in FP8, else 2; fp32 is 4) and its bf16 (fp32: 4-byte) output, each `batch` times.
double gemm_operand_bytes(Precision p, const Gemm& g);
// An MoE layer's routed experts as one grouped GEMM: `g.batch` experts of `g.m` tokens each. Every
// expert's weights are read from HBM however few tokens it has, so below a few hundred tokens per
// expert the kernel streams weights, not tensor-core math: the time is the larger of the dense
// GEMM time of the same shape and the operand bytes at the GPU's grouped_gemm_hbm_efficiency.
double grouped_gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g);
// A fused attention kernel: executes `flops` at the flash efficiency. Attention runs at its kernel's
// rate, measured or estimated, without the calibrated sustained fraction GEMMs take: the one
// published sweep of steps that attention dominates (Qwen3-235B at 16k-128k tokens with CP, the
// model zoo's forced-balance TFLOPS) is priced within -4% to +2% so, and up to +16% with it.
double flash_attention_time_s(const GpuSpec& gpu, Precision p, double flops);
// Forward and backward times of causal fused attention doing `forward_flops` (masked half not
// counted) with `kernel` at `head_dim` and `seq_len`: from the GPU's measured curve of that kernel
// (nearest head dimension, linear in log2 of the sequence length, clamped at the measured ends),
// or, without one, at the flash efficiency with backward = 2.5 x forward (Dao 2023).
struct AttentionTimes {
  double forward_s = 0, backward_s = 0;
  bool measured = false;  // from a curve
};
AttentionTimes attention_times(const GpuSpec& gpu, Precision p, const std::string& kernel, int64_t head_dim,
                               int64_t seq_len, double forward_flops);
// The curve attention_times prices `kernel` at `head_dim` by (the nearest head dimension of that
// kernel's curves), or null where the GPU has none for it.
const AttentionCurve* attention_curve(const GpuSpec& gpu, const std::string& kernel, int64_t head_dim);
// A memory-bound kernel that reads and writes `bytes` in all.
double memory_time_s(const GpuSpec& gpu, double bytes);

}  // namespace parallax
