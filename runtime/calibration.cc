#include "runtime/calibration.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>

#include <Eigen/Dense>

#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "runtime/buffer.h"

namespace parallax {

namespace {

// Median seconds of `reps` runs of f after one warm-up run.
template <class F>
double time_median(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Buffer random_buffer(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  Buffer b(n);
  for (float& x : b) x = d(rng);  // never time on all-zero data
  return b;
}

struct GemmFit {
  double peak_flops = 0, half_dim = 0;
};

GemmFit measure_gemm(bool quick) {
  const std::vector<int> dims = quick ? std::vector<int>{32, 128, 384} : std::vector<int>{32, 64, 128, 256, 512};
  std::vector<std::array<int, 3>> shapes;
  std::vector<double> flops_per_s;
  for (int m : dims)
    for (int n : dims)
      for (int k : dims) {
        Buffer a = random_buffer(static_cast<size_t>(m) * k), w = random_buffer(static_cast<size_t>(n) * k), y(static_cast<size_t>(m) * n);
        const double s = time_median(quick ? 3 : 5, [&] { kernels::matmul_forward(y.data(), a.data(), w.data(), nullptr, m, k, n); });
        shapes.push_back({m, n, k});
        flops_per_s.push_back(2.0 * m * n * k / s);
      }
  GemmFit fit;
  fit.peak_flops = *std::max_element(flops_per_s.begin(), flops_per_s.end());
  std::vector<double> eff;
  for (double f : flops_per_s) eff.push_back(f / fit.peak_flops);
  fit.half_dim = fit_gemm_half_dim(shapes, eff);
  return fit;
}

double measure_copy_bandwidth(bool quick) {
  const size_t n = (quick ? 8u : 32u) << 20;  // floats
  Buffer a = random_buffer(n), b(n);
  const double s = time_median(5, [&] { std::copy(a.begin(), a.end(), b.begin()); });
  return 2.0 * n * sizeof(float) / s;  // read + write
}

// Bytes per second our elementwise kernels achieve (layernorm: read 1 + write 1; GELU the same).
double measure_elementwise_bandwidth() {
  const int n = 4096, c = 512;
  Buffer x = random_buffer(static_cast<size_t>(n) * c), y(x.size()), w(c, 1.0f), bias(c, 0.0f), mean(n), rstd(n);
  const double ln = time_median(5, [&] { kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), n, c); });
  const double gelu = time_median(5, [&] { kernels::gelu_forward(y.data(), x.data(), static_cast<long>(x.size())); });
  return 2.0 * 2.0 * x.size() * sizeof(float) / (ln + gelu);
}

// Bytes per second of the optimizer step as the trainer runs it in fp32: gradient norm (read g),
// AdamW (read g, p, m, v; write p, m, v), zeroing the gradients: 36 bytes per parameter.
double measure_optimizer_bandwidth(bool quick) {
  const size_t n = (quick ? 2u : 8u) << 20;
  Buffer p = random_buffer(n), g = random_buffer(n), m(n, 0.0f), v(n, 0.0f);
  kernels::AdamWConfig cfg;
  int step = 0;
  const double s = time_median(5, [&] {
    double sumsq = 0;
    for (float x : g) sumsq += static_cast<double>(x) * x;
    kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<long>(n), cfg, ++step,
                          static_cast<float>(1.0 / (1.0 + sumsq * 1e-12)));
    std::fill(g.begin(), g.end(), 0.5f);
  });
  return 36.0 * n / s;
}

// FLOP/s of the attention kernel counting only the causal half it computes.
double measure_attention(bool quick) {
  const kernels::AttentionShape s{1, quick ? 128 : 256, 4, 4, 32};
  const size_t q = static_cast<size_t>(s.b) * s.t * s.h * s.d;
  Buffer qb = random_buffer(q), kb = random_buffer(q), vb = random_buffer(q), out(q),
         probs(static_cast<size_t>(s.b) * s.h * s.t * s.t);
  const double sec = time_median(5, [&] { kernels::attention_forward(out.data(), probs.data(), qb.data(), kb.data(), vb.data(), s); });
  return 0.5 * 4.0 * s.t * s.t * s.h * s.d * s.b / sec;
}

AlphaBeta measure_allreduce(Communicator& world, bool quick) {
  std::vector<double> bytes, seconds;
  for (int64_t count = 256; count <= (quick ? (int64_t{1} << 20) : (int64_t{1} << 22)); count *= 4) {
    Buffer data = random_buffer(static_cast<size_t>(count));
    world.barrier();
    double s = time_median(quick ? 5 : 10, [&] { world.all_reduce(data.data(), count, ReduceOp::kSum); });
    float slowest = static_cast<float>(s);
    world.all_reduce(&slowest, 1, ReduceOp::kMax);
    bytes.push_back(static_cast<double>(count) * sizeof(float));
    seconds.push_back(slowest);
  }
  return fit_allreduce(bytes, seconds, world.size());
}

double memory_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib)
    if (key == "MemTotal:") return kib / 1048576.0;
  return 16;
}

}  // namespace

AlphaBeta fit_allreduce(const std::vector<double>& bytes, const std::vector<double>& seconds, int ranks) {
  // t = a + b S by least squares; a = 2(n-1) alpha, b = 2(n-1)/n / busbw.
  Eigen::MatrixXd A(bytes.size(), 2);
  Eigen::VectorXd t(seconds.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    A(i, 0) = 1.0;
    A(i, 1) = bytes[i];
    t(i) = seconds[i];
  }
  const Eigen::VectorXd x = A.colPivHouseholderQr().solve(t);
  const double n = ranks;
  AlphaBeta ab;
  ab.latency_s = std::max(0.0, x(0)) / (2 * (n - 1));
  ab.busbw_Bps = x(1) > 0 ? 2 * (n - 1) / n / x(1) : 1e12;
  return ab;
}

double fit_gemm_half_dim(const std::vector<std::array<int, 3>>& shapes, const std::vector<double>& efficiency) {
  double best = 0, best_err = INFINITY;
  for (double h = 0; h <= 4096; h = h < 1 ? 1 : h * 1.05) {
    double err = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      double model = 1;
      for (int d : shapes[i]) model *= d / (d + h);
      const double r = std::log(efficiency[i]) - std::log(model);
      err += r * r;
    }
    if (err < best_err) best_err = err, best = h;
  }
  return best;
}

Result<nlohmann::json> calibrate_cluster(Communicator& world, const CalibrationOptions& o) {
  if (world.size() < 2) return Error{"calibrate needs at least 2 ranks to measure collectives (mpirun -np 2 calibrate)"};
  const GemmFit gemm = measure_gemm(o.quick);
  const double copy = measure_copy_bandwidth(o.quick), elementwise = measure_elementwise_bandwidth();
  const double attention = measure_attention(o.quick), optimizer = measure_optimizer_bandwidth(o.quick);
  const AlphaBeta ar = measure_allreduce(world, o.quick);
  const double tflops = gemm.peak_flops / 1e12, gbps = copy / 1e9;
  const std::string how = "measured by parallax calibrate" + std::string(o.quick ? " --quick" : "") + " with " +
                          std::to_string(world.size()) + " ranks";
  return nlohmann::json{
      {"name", o.name}, {"source", how + ": one rank per CPU core, fp32 Eigen kernels, Open MPI on one host"},
      {"gpu", {{"name", "CPU core (fp32, Eigen)"},
               {"peak_tflops", {{"bf16", tflops}, {"fp16", tflops}, {"fp32", tflops}}},
               {"hbm_gib", memory_gib() / world.size()}, {"hbm_gbps", gbps}, {"gemm_max_efficiency", 1.0},
               {"gemm_half_dim", gemm.half_dim}, {"sm_count", 1}, {"gemm_tile_m", 16}, {"gemm_tile_n", 16},
               {"flash_attention_efficiency", std::min(1.0, attention / gemm.peak_flops)},
               {"memory_efficiency", std::min(1.0, elementwise / copy)},
               {"optimizer_efficiency", std::min(1.0, optimizer / copy)}, {"reserved_gib", 0.0},
               {"source", how + ": peak = best GEMM over a sweep of shapes, half_dim fitted to all; bandwidth = "
                                "copy; elementwise and attention efficiencies from the runtime's own kernels"}}},
      {"node", {{"gpus", world.size()}, {"busbw_gbps", ar.busbw_Bps / 1e9}, {"latency_us", ar.latency_s * 1e6},
                {"source", how + ": all-reduce 1 KiB to 16 MiB, least-squares alpha-beta fit"}}},
      {"network", {{"bw_per_gpu_gbps", ar.busbw_Bps / 1e9}, {"latency_us", ar.latency_s * 1e6}, {"topology", "fat-tree"},
                   {"oversubscription", 1.0}, {"nodes_per_leaf", 1}, {"source", how + ": one host, as the node"}}},
      {"host", {{"memory_gib", memory_gib()}, {"memory_gbps", gbps}, {"pcie_gbps", gbps},
                {"source", how + ": /proc/meminfo and the copy bandwidth"}}}};
}

}  // namespace parallax
