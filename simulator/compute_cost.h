// Roofline compute cost: how long one GPU of a ClusterSpec takes for a GEMM (FLOPs at the peak
// times a shape-dependent efficiency) or a memory-bound kernel (bytes at HBM bandwidth times an
// efficiency). The analytical step model and the simulator's lowering both price ops here.
#pragma once

#include "models/layer_cost.h"
#include "simulator/cluster_spec.h"

namespace parallax {

// Efficiency of one GEMM shape: max * prod over M, N, K of d / (d + half_dim), times the wave
// quantization of its output tiles (useful tiles / tiles of whole waves; tiles shrink to the
// problem for small dimensions, in steps of 16).
double gemm_efficiency(const GpuSpec& gpu, const Gemm& g);
double wave_efficiency(const GpuSpec& gpu, const Gemm& g);
double gemm_time_s(const GpuSpec& gpu, Precision p, const Gemm& g);
// A fused attention kernel: executes `flops` at the flash efficiency.
double flash_attention_time_s(const GpuSpec& gpu, Precision p, double flops);
// A memory-bound kernel that reads and writes `bytes` in all.
double memory_time_s(const GpuSpec& gpu, double bytes);

}  // namespace parallax
