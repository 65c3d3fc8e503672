// A cluster with round numbers for hand-derived expectations: 100 TFLOP/s, perfect GEMMs,
// 1,000 GB/s HBM at full efficiency, 8 GPUs per node at 100 GB/s busbw and 1 us per step, 10 GB/s
// per GPU between nodes at 10 us.
#pragma once

#include <nlohmann/json.hpp>

namespace parallax::testing_support {

inline nlohmann::json round_cluster_json() {
  return nlohmann::json::parse(R"({
    "name": "round", "source": "test",
    "gpu": {"name": "G", "peak_tflops": {"bf16": 100, "fp16": 100, "fp32": 10}, "hbm_gib": 64,
            "hbm_gbps": 1000, "gemm_max_efficiency": 1.0, "gemm_half_dim": 0,
            "sm_count": 1, "gemm_tile_m": 16, "gemm_tile_n": 16,
            "flash_attention_efficiency": 0.5, "memory_efficiency": 1.0, "reserved_gib": 1, "source": "test"},
    "node": {"gpus": 8, "busbw_gbps": 100, "latency_us": 1, "source": "test"},
    "network": {"bw_per_gpu_gbps": 10, "latency_us": 10, "topology": "fat-tree", "oversubscription": 2,
                "nodes_per_leaf": 4, "source": "test"},
    "host": {"memory_gib": 1024, "memory_gbps": 200, "pcie_gbps": 20, "source": "test"}
  })");
}

}  // namespace parallax::testing_support
