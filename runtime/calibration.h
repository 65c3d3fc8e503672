// Calibration: microbenchmarks of this machine through the runtime's own kernels and
// communicator — GEMM throughput by shape, memory bandwidth, elementwise and attention kernel
// speed, all-reduce time over message sizes — fitted into the cluster description the simulator
// reads (Eigen least squares for the alpha-beta line, a search for the GEMM size curve). Every
// rank must call it (the collectives run over `world`).
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "runtime/communicator.h"

namespace parallax {

struct CalibrationOptions {
  bool quick = false;  // fewer shapes and repetitions: under a minute
  std::string name = "cpu-localhost";
  // --device cuda: seconds of back-to-back 8192^3 bf16 GEMMs whose last seconds' rate, against
  // the first seconds', scales the GEMM efficiency to what a long training run sustains.
  double sustained_s = 120;
};

// A cluster JSON (clusters/*.json schema) describing this machine with `world.size()` ranks as
// one node. Errors: fewer than two ranks (collectives cannot be measured).
Result<nlohmann::json> calibrate_cluster(Communicator& world, const CalibrationOptions& options);

// The alpha-beta fit of ring all-reduce times over n ranks: t = 2(n-1) alpha + 2(n-1)/n S / busbw.
struct AlphaBeta {
  double latency_s = 0, busbw_Bps = 0;
};
AlphaBeta fit_allreduce(const std::vector<double>& bytes, const std::vector<double>& seconds, int ranks);

// The d_half of efficiency(M, N, K) = prod d / (d + d_half) that best fits measured efficiencies
// (log least squares over a geometric grid).
double fit_gemm_half_dim(const std::vector<std::array<int, 3>>& shapes, const std::vector<double>& efficiency);

}  // namespace parallax
