// ClusterSpec: what a plan runs on — one GPU type, nodes of several GPUs joined by NVLink/NVSwitch,
// and a network between nodes. Read from Parallax's cluster JSON (clusters/*.json, or the file
// `calibrate` writes); every key carries its unit (_gbps = gigabytes per second in the nccl-tests
// busbw convention, _us, _gib, _tflops) and every section a "source" naming where its numbers
// come from. The cost models (compute_cost.h, collective_cost.h) read only this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/layer_cost.h"
#include "models/status.h"
#include "program/plan.h"
#include "simulator/calibration.h"

namespace parallax {

// Measured throughput of one fused attention kernel (causal, bf16) against sequence length, with
// the causal convention of the FlashAttention benchmarks (the masked half is not counted; backward
// = 2.5 x forward FLOPs).
struct AttentionCurve {
  std::string kernel;  // fa2 | fa3 | cudnn
  int64_t head_dim = 0;
  std::vector<double> seq_len, fwd_tflops, bwd_tflops;
};

// Measured bf16 GEMM rates on a grid: every (M, N, K) of `dims` cubed, `tflops` M-major then N
// then K (calibrate --device cuda measures it on one GPU, its sustained rate).
struct GemmGrid {
  std::vector<double> dims, tflops;
  double at(size_t i, size_t j, size_t k) const { return tflops[(i * dims.size() + j) * dims.size() + k]; }
};

struct GpuSpec {
  std::string name;
  double peak_bf16_tflops = 0;
  double peak_fp16_tflops = 0;
  double peak_fp32_tflops = 0;
  double peak_fp8_tflops = 0;  // dense FP8 tensor throughput; 0: the GPU has none (A100)
  double hbm_gib = 0;
  double hbm_gbps = 0;
  // Achieved fraction of peak for a GEMM: max_eff * prod over (M, N, K) of d / (d + half_dim),
  // so small or skinny GEMMs run slower; calibration fits both numbers.
  double gemm_max_efficiency = 0;
  double gemm_half_dim = 0;
  // Wave quantization: a GEMM runs as output tiles of gemm_tile_m x gemm_tile_n, sm_count at a
  // time; the last wave and ragged tiles do partial work.
  int64_t sm_count = 0;
  int64_t gemm_tile_m = 0, gemm_tile_n = 0;
  GemmGrid gemm_grid;  // when measured, GEMM efficiency interpolates it instead of the curve above
  // FP8 GEMMs' own curve, of the same form. FP8 tensor cores do twice the math per operand byte
  // and fill later: cuBLASLt's tensorwise FP8 peaks near 71% of the FP8 peak where bf16 reaches
  // 80%, and needs larger shapes to get there. max 0: FP8 GEMMs take bf16's efficiency (grid or
  // curve).
  double fp8_gemm_max_efficiency = 0;
  double fp8_gemm_half_dim = 0;
  double flash_attention_efficiency = 0;  // fraction of peak a fused attention kernel reaches
  std::vector<AttentionCurve> attention;  // measured curves; a kernel without one uses the fraction
  double memory_efficiency = 0;           // fraction of HBM bandwidth elementwise kernels reach
  double optimizer_efficiency = 0;        // the same for the optimizer's passes (default: memory_efficiency)
  // Fraction of HBM bandwidth an MoE grouped GEMM streams its operands at (the experts' weights
  // dominate at few tokens per expert); default: memory_efficiency.
  double grouped_gemm_hbm_efficiency = 0;
  // FP8 GEMMs with one scale per row of each operand over tensorwise-scaled ones (default 1).
  double fp8_rowwise_gemm_fraction = 1;
  bool mxfp8 = false;  // tensor cores apply MXFP8's per-32-element block scales (Blackwell)
  double reserved_gib = 0;                // CUDA context, NCCL and cuBLAS workspaces
  // Which calibrated sustained fraction applies (GPUs of one die at one power limit share one);
  // default: the GPU's name.
  std::string power_class;
  // Set by apply_calibration (calibration.h); 1 = the measured rates as they are.
  double sustained_tensor_fraction = 1;  // GEMM rates sustained in training (calibration.h)
  double fp8_gemm_fraction = 1;          // FP8 GEMMs sustained in training over their measured rate
  double grouped_gemm_fraction = 1;      // MoE experts' grouped GEMMs over a dense GEMM's rate

  double peak_flops(Precision p) const;
  double hbm_bytes() const { return hbm_gib * 1073741824.0; }
};

struct NodeSpec {
  int64_t gpus = 0;
  double busbw_gbps = 0;  // intra-node collective bus bandwidth (nccl-tests busbw, ring)
  double latency_us = 0;  // per ring step
  int64_t nccl_sms = 0;   // SMs an intra-node collective holds (NCCL CTAs, one per channel); 0: not modelled
  // Rings priced as NCCL's tuner prices its three protocols (collective_cost.h), the fastest
  // chosen per message; off: one protocol at busbw with latency_us per step.
  bool nccl_protocols = false;
  // NVLink SHARP (NVSwitch multicast): NCCL's NVLS all-reduce inside a node, for groups of at least
  // nvls_min_ranks GPUs. nvls_busbw_gbps is nccl-tests' busbw over all the node's GPUs; the
  // algorithm's algbw (busbw x gpus / 2(gpus - 1)) holds for fewer (measured on H200: 259-270 GB/s
  // from 5 to 8 GPUs). nvls_latency_us is the fixed part of its time. 0: no NVLS.
  double nvls_busbw_gbps = 0, nvls_latency_us = 0;
  int64_t nvls_min_ranks = 0;
};

struct NetworkSpec {
  double bw_per_gpu_gbps = 0;  // each GPU's NIC, one direction
  double latency_us = 0;       // per ring step across nodes
  std::string topology;        // "fat-tree"
  double oversubscription = 1; // >1: traffic leaving a leaf switch shares less bandwidth
  int64_t nodes_per_leaf = 0;  // nodes under one leaf switch
  int64_t nccl_sms = 0;        // SMs a collective across nodes holds; 0: not modelled
};

struct HostSpec {
  double memory_gib = 0;     // per node
  double memory_gbps = 0;    // per node, shared by its GPUs (CPU optimizer for offload)
  double pcie_gbps = 0;      // per GPU, one direction
};

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  NodeSpec node;
  NetworkSpec network;
  HostSpec host;
  int64_t max_nodes = 0;  // 0: as many as a plan asks for
  // The calibration the cluster file names ("calibration": NAME or PATH; "" or "none": none). The
  // tools apply it (tools/cli.h load_cluster_or_fail); the library prices the physics alone until
  // apply_calibration (calibration.h) sets:
  std::string calibration_ref;
  Calibration calibration;
};

// "" if a plan of precision `p` (FP8: scaled by `recipe`) can run on the cluster's GPU, else why not
// in one line (FP8 on a GPU without FP8, MXFP8 without block-scaled tensor cores).
std::string gpu_refusal(const ClusterSpec& c, Precision p, Fp8Recipe recipe = Fp8Recipe::kDelayed);

Result<ClusterSpec> cluster_from_json(const nlohmann::json& j, const std::string& where);
// `name_or_path`: a path, or a name found as clusters/NAME.json in the data directory.
Result<ClusterSpec> load_cluster(const std::string& name_or_path);

}  // namespace parallax
