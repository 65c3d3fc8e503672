#include "runtime/cuda/gpu_calibration.h"

#include <algorithm>
#include <array>
#include <functional>
#include <vector>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/norm.h"
#include "runtime/cuda/device_allocator.h"

namespace parallax {

namespace cu = kernels::cuda;

namespace {

// Median seconds of `reps` runs of f on the current stream, after one warm-up run.
double time_median(int reps, const std::function<void()>& f) {
  cudaEvent_t a = nullptr, b = nullptr;
  cu::check(cudaEventCreate(&a), "event");
  cu::check(cudaEventCreate(&b), "event");
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cu::check(cudaEventRecord(a, cu::stream()), "event");
    f();
    cu::check(cudaEventRecord(b, cu::stream()), "event");
    cu::check(cudaEventSynchronize(b), "event");
    float ms = 0;
    cu::check(cudaEventElapsedTime(&ms, a, b), "event");
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class T>
DeviceArray<T> random_array(int64_t n, uint64_t seed) {
  DeviceArray<T> a(n);
  cu::fill_uniform(a.data(), n, seed, 1.0f);
  return a;
}

struct GemmSweep {
  double best_flops = 0, half_dim = 0;
};

GemmSweep measure_gemm(bool quick) {
  const std::vector<int> dims = quick ? std::vector<int>{512, 2048, 8192} : std::vector<int>{256, 1024, 2048, 4096, 8192};
  std::vector<std::array<int, 3>> shapes;
  std::vector<double> flops;
  for (int m : dims)
    for (int n : dims)
      for (int k : dims) {
        DeviceArray<cu::bf16> x = random_array<cu::bf16>(int64_t{m} * k, 1), w = random_array<cu::bf16>(int64_t{n} * k, 2),
                              y(int64_t{m} * n);
        const double s = time_median(quick ? 3 : 7, [&] { cu::matmul_forward<cu::bf16>(y.data(), x.data(), w.data(), nullptr, m, k, n); });
        shapes.push_back({m, n, k});
        flops.push_back(2.0 * m * n * k / s);
      }
  GemmSweep g;
  g.best_flops = *std::max_element(flops.begin(), flops.end());
  std::vector<double> eff;
  for (double f : flops) eff.push_back(f / g.best_flops);
  g.half_dim = fit_gemm_half_dim(shapes, eff);
  return g;
}

// Bytes read plus written per second by a device-to-device copy of 1 GiB (256 MiB with --quick).
double measure_copy(bool quick) {
  const int64_t bytes = int64_t{quick ? 256 : 1024} << 20;
  DeviceArray<char> a(bytes), b(bytes);
  cu::check(cudaMemsetAsync(a.data(), 1, bytes, cu::stream()), "memset");
  const double s = time_median(5, [&] {
    cu::check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, cu::stream()), "copy");
  });
  return 2.0 * static_cast<double>(bytes) / s;
}

// Layernorm and GELU in bf16 over 32M elements: each reads one tensor and writes one.
double measure_elementwise() {
  const int n = 16384, c = 2048;
  const int64_t size = int64_t{n} * c;
  DeviceArray<cu::bf16> x = random_array<cu::bf16>(size, 3), y(size), w = random_array<cu::bf16>(c, 4);
  DeviceArray<float> mean(n), rstd(n);
  const double ln = time_median(7, [&] { cu::layernorm_forward<cu::bf16>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, n, c); });
  const double gelu = time_median(7, [&] { cu::gelu_forward<cu::bf16>(y.data(), x.data(), size); });
  return 2.0 * 2.0 * static_cast<double>(size) * sizeof(cu::bf16) / (ln + gelu);
}

// The optimizer as the GPU trainer runs it: AdamW reads g, p, m, v and writes p, m, v and the
// bf16 copy (30 bytes per parameter).
double measure_optimizer(bool quick) {
  const int64_t n = int64_t{quick ? 64 : 256} << 20;
  DeviceArray<float> p = random_array<float>(n, 5), g = random_array<float>(n, 6), m(n), v(n);
  DeviceArray<cu::bf16> copy(n);
  cu::check(cudaMemsetAsync(m.data(), 0, n * 4, cu::stream()), "memset");
  cu::check(cudaMemsetAsync(v.data(), 0, n * 4, cu::stream()), "memset");
  kernels::AdamWConfig cfg;
  int step = 0;
  const double s = time_median(5, [&] { cu::adamw_update<cu::bf16>(p.data(), copy.data(), g.data(), m.data(), v.data(), n, cfg, ++step); });
  return 30.0 * static_cast<double>(n) / s;
}

// FLOP/s of fused causal attention forward + backward counting the causal half it computes:
// forward 2 b s^2 H D (half of QK^T and AV's 4 b s^2 H D), backward 2.5 x that.
double measure_attention(bool quick) {
  const kernels::AttentionShape s{quick ? 1 : 2, 2048, 16, 16, 128};
  const int64_t n = int64_t{s.b} * s.t * s.h * s.d;
  DeviceArray<cu::bf16> q = random_array<cu::bf16>(n, 7), k = random_array<cu::bf16>(n, 8), v = random_array<cu::bf16>(n, 9),
                        o(n), dout = random_array<cu::bf16>(n, 10), dq(n), dk(n), dv(n);
  DeviceArray<float> lse(int64_t{s.b} * s.h * s.t);
  const double sec = time_median(5, [&] {
    cu::flash_attention_forward<cu::bf16>(o.data(), lse.data(), q.data(), k.data(), v.data(), s);
    cu::flash_attention_backward<cu::bf16>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                           o.data(), lse.data(), s);
  });
  const double fwd = 2.0 * s.b * double(s.t) * s.t * s.h * s.d;
  return 3.5 * fwd / sec;
}

}  // namespace

Result<nlohmann::json> calibrate_gpu_cluster(const nlohmann::json& base, const CalibrationOptions& o) {
  if (!cu::device_available()) return Error{"calibrate --device cuda: no CUDA device is visible"};
  nlohmann::json c = base;
  try {
    const double peak = base.at("gpu").at("peak_tflops").at("bf16").get<double>() * 1e12;
    const double hbm = base.at("gpu").at("hbm_gbps").get<double>() * 1e9;
    const GemmSweep gemm = measure_gemm(o.quick);
    const double copy = measure_copy(o.quick), elementwise = measure_elementwise();
    const double optimizer = measure_optimizer(o.quick), attention = measure_attention(o.quick);
    const std::string how = "measured by parallax calibrate --device cuda" + std::string(o.quick ? " --quick" : "") +
                            " on one " + cu::device_name();
    nlohmann::json& g = c["gpu"];
    g["gemm_max_efficiency"] = std::min(1.0, gemm.best_flops / peak);
    g["gemm_half_dim"] = gemm.half_dim;
    g["flash_attention_efficiency"] = std::min(1.0, attention / peak);
    g["memory_efficiency"] = std::min(1.0, elementwise / hbm);
    g["optimizer_efficiency"] = std::min(1.0, optimizer / hbm);
    g["measured"] = {{"best_bf16_gemm_tflops", gemm.best_flops / 1e12}, {"copy_gbps", copy / 1e9},
                     {"elementwise_gbps", elementwise / 1e9}, {"optimizer_gbps", optimizer / 1e9},
                     {"attention_tflops", attention / 1e12}};
    g["source"] = how + ": efficiencies relative to the datasheet peak " + std::to_string(peak / 1e12) +
                  " TFLOP/s and " + std::to_string(hbm / 1e9) + " GB/s; bf16 GEMM sweep (cuBLASLt), half_dim fitted; " +
                  "fused attention fwd+bwd (causal half); layernorm + GELU; AdamW with bf16 copy";
    c["name"] = o.name;
    c["source"] = how + "; node, network and host sections kept from " + base.value("name", std::string("the base")) +
                  " (one GPU cannot measure collectives)";
  } catch (const std::exception& e) {
    return Error{std::string("calibrate --device cuda: ") + e.what()};
  }
  return c;
}

}  // namespace parallax
