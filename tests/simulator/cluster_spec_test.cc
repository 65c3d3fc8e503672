#include "simulator/cluster_spec.h"

#include <gtest/gtest.h>

#include "simulator/compute_cost.h"
#include "test_cluster.h"

namespace parallax {
namespace {

TEST(ClusterSpec, BundledClustersLoad) {
  for (const char* name : {"dgx-h100", "dgx-a100", "dgx-a100-40gb", "hgx-h200", "dgx-b200"}) {
    Result<ClusterSpec> c = load_cluster(name);
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_EQ(c->node.gpus, 8) << name;
    EXPECT_TRUE(c->node.nccl_protocols) << name;  // NCCL's rings, priced per protocol
  }
  const ClusterSpec a100 = load_cluster("dgx-a100").value();
  EXPECT_DOUBLE_EQ(a100.gpu.peak_flops(Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(a100.network.bw_per_gpu_gbps, 25);  // 200 Gb/s HDR per GPU
  EXPECT_DOUBLE_EQ(load_cluster("dgx-h100").value().gpu.peak_flops(Precision::kFp32), 66.9e12);
}

// DGX B200 (clusters/dgx-b200.json): the datasheet peaks per GPU, dense. NVIDIA's HGX B200 table:
// BF16 4.5 PFLOP/s sparse = 2,250 TFLOP/s dense, FP8 9 sparse = 4,500 dense, FP32 75; HBM3e
// 183,359 MiB = 179.06 GiB visible at 8 TB/s (64 TB/s / 8); one 400 Gb/s ConnectX-7 per GPU =
// 50 GB/s; NVLink 5: nccl-tests over 8 B200 (NCCL 2.27.7) measured 682.2 GB/s busbw for a ring
// all-reduce with NVLS off and 838.0 with NVLS, chosen from 6 GPUs.
TEST(ClusterSpec, DgxB200) {
  Result<ClusterSpec> c = load_cluster("dgx-b200");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->node.gpus, 8);
  EXPECT_DOUBLE_EQ(c->gpu.peak_flops(Precision::kBf16), 2250e12);
  EXPECT_DOUBLE_EQ(c->gpu.peak_flops(Precision::kFp16), 2250e12);
  EXPECT_DOUBLE_EQ(c->gpu.peak_flops(Precision::kFp8), 4500e12);
  EXPECT_DOUBLE_EQ(c->gpu.peak_flops(Precision::kFp32), 75e12);
  EXPECT_DOUBLE_EQ(c->gpu.hbm_gib, 179.06);
  EXPECT_DOUBLE_EQ(c->gpu.hbm_gbps, 8000);
  EXPECT_EQ(c->gpu.sm_count, 148);
  EXPECT_EQ(c->gpu.power_class, "b200-sxm-1000w");
  EXPECT_DOUBLE_EQ(c->network.bw_per_gpu_gbps, 50);
  EXPECT_DOUBLE_EQ(c->node.busbw_gbps, 682);
  EXPECT_DOUBLE_EQ(c->node.nvls_busbw_gbps, 838);
  EXPECT_EQ(c->node.nvls_min_ranks, 6);
}

// B200 GEMMs on the curve fitted to XLA's measured B200 table (clusters/dgx-b200.json). 4,096^3: 16 x 32
// = 512 output tiles of 256 x 128 on 148 SMs take 4 waves, 512 / 592 = 0.8649 of them busy; bf16
// 0.78 x 0.8649 x (4096 / 4274)^3 = 0.5938 of 2,250 = 1,336.0 TFLOP/s (1,416.9 measured); FP8
// 0.763 x 0.8649 x (4096 / 4382)^3 = 0.5389 of 4,500 = 2,425.2 (2,765.0 measured).
TEST(ClusterSpec, DgxB200GemmsAsMeasured) {
  const GpuSpec gpu = load_cluster("dgx-b200").value().gpu;
  const Gemm g{"4096^3", 4096, 4096, 4096};
  EXPECT_NEAR(gemm_efficiency(gpu, g, Precision::kBf16) * 2250, 1336.0, 0.1);
  EXPECT_NEAR(gemm_efficiency(gpu, g, Precision::kFp8) * 4500, 2425.2, 0.1);
}

// B200 attention as NVIDIA's cudnn-frontend benchmark measured it (causal, 128 query / 8 KV heads of
// 128, batch 1): 8,192 tokens carry 4 x 8192^2 x 128 x 128 / 2 = 2.19902e12 forward FLOPs (the masked
// half not counted); cuDNN took 1.877 ms forward and 5.833 ms backward (2.5 x the FLOPs), PyTorch's
// FlashAttention-2 5.889 and 18.395 ms. The curves give them back (no calibration: sustained 1).
TEST(ClusterSpec, DgxB200AttentionAsMeasured) {
  const ClusterSpec c = load_cluster("dgx-b200").value();
  const double flops = 4.0 * 8192 * 8192 * 128 * 128 / 2;
  const AttentionTimes cudnn = attention_times(c.gpu, Precision::kBf16, "cudnn", 128, 8192, flops);
  ASSERT_TRUE(cudnn.measured);
  EXPECT_NEAR(cudnn.forward_s, 1.877e-3, 1e-6);
  EXPECT_NEAR(cudnn.backward_s, 5.833e-3, 1e-6);
  const AttentionTimes fa2 = attention_times(c.gpu, Precision::kBf16, "fa2", 128, 8192, flops);
  EXPECT_NEAR(fa2.forward_s, 5.889e-3, 1e-6);
  EXPECT_NEAR(fa2.backward_s, 18.395e-3, 2e-6);
  EXPECT_FALSE(attention_times(c.gpu, Precision::kBf16, "fa3", 128, 8192, flops).measured);
}

// NVLink's ring collectives and NVLS all-reduce as measured: 8 H200 run rings at 365 GB/s (all-gather
// 361.4, reduce-scatter 362.9, all-reduce with NVLS off 365.6), the H100's 370; NVLS all-reduce 480
// on both, 134 us fixed. A100s (NVSwitch 2) have no NVLS.
TEST(ClusterSpec, NvlinkRingAndNvls) {
  const ClusterSpec h200 = load_cluster("hgx-h200").value(), h100 = load_cluster("dgx-h100").value();
  EXPECT_DOUBLE_EQ(h200.node.busbw_gbps, 365);
  EXPECT_DOUBLE_EQ(h100.node.busbw_gbps, 370);
  for (const ClusterSpec* c : {&h200, &h100}) {
    EXPECT_DOUBLE_EQ(c->node.nvls_busbw_gbps, 480);
    EXPECT_DOUBLE_EQ(c->node.nvls_latency_us, 134);
    EXPECT_EQ(c->node.nvls_min_ranks, 5);
  }
  EXPECT_DOUBLE_EQ(load_cluster("dgx-a100").value().node.nvls_busbw_gbps, 0);
}

TEST(ClusterSpec, RoundTestCluster) {
  Result<ClusterSpec> c = cluster_from_json(testing_support::round_cluster_json(), "round.json");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_DOUBLE_EQ(c->gpu.hbm_bytes(), 64.0 * 1073741824.0);
  EXPECT_FALSE(c->node.nccl_protocols);  // absent: one protocol, latency_us per step
}

TEST(ClusterSpec, ErrorsNameSectionAndKey) {
  auto error_after = [](auto edit) {
    nlohmann::json j = testing_support::round_cluster_json();
    edit(j);
    Result<ClusterSpec> c = cluster_from_json(j, "c.json");
    return c.ok() ? std::string("ok") : c.error();
  };
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["gpu"].erase("hbm_gbps"); }),
            "c.json: gpu: key 'hbm_gbps': missing required key");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["node"]["nvls_busbw_gbps"] = 480; }),
            "c.json: node: key 'nvls_min_ranks': NVLS needs both nvls_busbw_gbps and nvls_min_ranks");
  EXPECT_EQ(error_after([](nlohmann::json& j) {
              j["node"]["nvls_busbw_gbps"] = 480;
              j["node"]["nvls_min_ranks"] = 9;
            }),
            "c.json: node: key 'nvls_min_ranks': must be <= gpus");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["network"]["bw_per_gpu_gbs"] = 50; }),
            "c.json: network: key 'bw_per_gpu_gbs': is not a key of this section (misspelt?)");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["nodes"] = 4; }),
            "c.json: key 'nodes': is not a key of this section (misspelt?)");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["node"]["gpus"] = 0; }),
            "c.json: node: key 'gpus': must be >= 1, got 0");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["gpu"]["gemm_max_efficiency"] = 1.5; }),
            "c.json: gpu: key 'gemm_max_efficiency': is a fraction and must be <= 1");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["network"]["topology"] = "torus"; }),
            "c.json: network: key 'topology': unknown 'torus' (supported: fat-tree)");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["host"].erase("source"); }),
            "c.json: host: key 'source': missing required key");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j.erase("network"); }),
            "c.json: key 'network': missing required key");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["gpu"]["peak_tflops"]["bf16"] = -1; }),
            "c.json: gpu.peak_tflops: key 'bf16': must be > 0, got -1");
  // A NIC typed in gigabits as if it were gigabytes is faster than any NIC.
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["network"]["bw_per_gpu_gbps"] = 400; }),
            "c.json: network: key 'bw_per_gpu_gbps': 400 GB/s per GPU is faster than any NIC (800 Gb/s = 100 GB/s): "
            "_gbps is gigaBYTES per second; write a 400 Gb/s NIC as 50 or \"400 Gb/s\"");
  // Memory in bytes and peaks in FLOP/s are beyond any GPU: the likely slip is named.
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["gpu"]["hbm_gib"] = 85899345920.0; }),
            "c.json: gpu: key 'hbm_gib': is in GiB and 85899345920 is beyond any GPU (bytes or MiB typed as GiB? an 80 GB "
            "H100 is 80)");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["gpu"]["peak_tflops"]["bf16"] = 989e12; }),
            "c.json: gpu.peak_tflops: key 'bf16': is in TFLOP/s and 989000000000000 is beyond any GPU (FLOP/s typed as "
            "TFLOP/s? an H100's bf16 peak is 989)");
  EXPECT_EQ(error_after([](nlohmann::json& j) { j["network"]["bw_per_gpu_gbps"] = "400 Gbps"; }),
            "c.json: network: key 'bw_per_gpu_gbps': cannot read bandwidth \"400 Gbps\" (a number of GB/s, or N "
            "Gb/s, Gbit/s, GB/s, Tb/s, TB/s)");
}

// Bandwidths may carry their unit: bits are divided by 8, terabytes multiplied by 1000.
TEST(ClusterSpec, BandwidthWithUnits) {
  nlohmann::json j = testing_support::round_cluster_json();
  j["network"]["bw_per_gpu_gbps"] = "400 Gb/s";
  j["gpu"]["hbm_gbps"] = "3.35 TB/s";
  j["node"]["busbw_gbps"] = "370 GB/s";
  j["host"]["pcie_gbps"] = "512 Gbit/s";
  Result<ClusterSpec> c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_DOUBLE_EQ(c->network.bw_per_gpu_gbps, 50);
  EXPECT_DOUBLE_EQ(c->gpu.hbm_gbps, 3350);
  EXPECT_DOUBLE_EQ(c->node.busbw_gbps, 370);
  EXPECT_DOUBLE_EQ(c->host.pcie_gbps, 64);
}

}  // namespace
}  // namespace parallax
