#include "runtime/cuda/gpu_calibration.h"

#include <algorithm>
#include <chrono>
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

// Median seconds of `reps` runs of f on the current stream, after one warm-up run; `before`, when
// given, runs untimed ahead of each.
double time_median(int reps, const std::function<void()>& f, const std::function<void()>& before = {}) {
  cudaEvent_t a = nullptr, b = nullptr;
  cu::check(cudaEventCreate(&a), "event");
  cu::check(cudaEventCreate(&b), "event");
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (before) before();
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
  double best_flops = 0;
  nlohmann::json rows = nlohmann::json::array();  // [m, n, k, TFLOP/s]
};

// Every (M, N, K) of the grid, 64 to 16,384 (256 to 8,192 with --quick).
GemmSweep measure_gemm(bool quick) {
  const std::vector<int> dims = quick ? std::vector<int>{256, 2048, 8192} : std::vector<int>{64, 256, 1024, 4096, 16384};
  GemmSweep g;
  for (int m : dims)
    for (int n : dims)
      for (int k : dims) {
        DeviceArray<cu::bf16> x = random_array<cu::bf16>(int64_t{m} * k, 1), w = random_array<cu::bf16>(int64_t{n} * k, 2),
                              y(int64_t{m} * n);
        const double s = time_median(quick ? 3 : 7, [&] { cu::matmul_forward<cu::bf16>(y.data(), x.data(), w.data(), nullptr, m, k, n); });
        g.rows.push_back({m, n, k, 2.0 * m * n * k / s / 1e12});
        g.best_flops = std::max(g.best_flops, 2.0 * m * n * k / s);
      }
  return g;
}

// `seconds` of back-to-back 8192^3 bf16 GEMMs, timed in windows of 20 GEMMs (about 30 ms): the
// median rate of the first and of the last 5 seconds. Power and clocks settle over minutes under
// load, so the last window's rate is what a long training run sustains.
nlohmann::json measure_sustained(double seconds) {
  const int n = 8192;
  DeviceArray<cu::bf16> a = random_array<cu::bf16>(int64_t{n} * n, 11), b = random_array<cu::bf16>(int64_t{n} * n, 12),
                        c(int64_t{n} * n);
  std::vector<std::pair<double, double>> windows;  // (seconds since start, TFLOP/s)
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while (elapsed() < seconds) {
    const double s = time_median(1, [&] {
      for (int i = 0; i < 20; ++i) cu::matmul_forward<cu::bf16>(c.data(), a.data(), b.data(), nullptr, n, n, n);
    });
    windows.push_back({elapsed(), 20 * 2.0 * n * double(n) * n / s / 1e12});
  }
  auto median_between = [&](double from, double to) {
    std::vector<double> r;
    for (const auto& [t, f] : windows)
      if (t >= from && t <= to) r.push_back(f);
    std::sort(r.begin(), r.end());
    return r.empty() ? 0.0 : r[r.size() / 2];
  };
  const double end = windows.empty() ? 0 : windows.back().first;
  nlohmann::json per_10s = nlohmann::json::array();
  for (double t = 0; t < end; t += 10) per_10s.push_back(median_between(t, t + 10));
  return {{"seconds", end}, {"shape", {n, n, n}}, {"first_5s_tflops", median_between(0, 5)},
          {"last_5s_tflops", median_between(end - 5, end)}, {"per_10s_tflops", per_10s}};
}

// Microseconds per kernel of 1,000 one-element launches: eager (the host's launch cost, the GPU
// idle between) and replayed as one CUDA graph (the GPU's own gap between dependent kernels).
nlohmann::json measure_launch_gap() {
  const int count = 1000;
  DeviceArray<float> x = random_array<float>(1, 13);
  auto many = [&] {
    for (int i = 0; i < count; ++i) cu::scale(x.data(), 1, 1.0f);
  };
  const double eager = time_median(5, many) / count;
  cudaStream_t old = cu::stream(), s = nullptr;
  cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cu::set_stream(s);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  many();
  cu::check(cudaStreamEndCapture(s, &graph), "capture");
  cu::check(cudaGraphInstantiate(&exec, graph, 0), "graph");
  const double replay = time_median(5, [&] { cu::check(cudaGraphLaunch(exec, s), "graph launch"); }) / count;
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
  cu::set_stream(old);
  cudaStreamDestroy(s);
  return {{"kernels", count}, {"eager_us_per_kernel", eager * 1e6}, {"graph_us_per_kernel", replay * 1e6}};
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

// The runtime's fused causal attention, forward and backward apart, over 16,384 tokens (b = 16,384
// / t sequences of t) with h d = 2,048, FLOPs in the FlashAttention benchmarks' causal convention
// (forward 2 b t^2 h d, backward 2.5 x that): the curves the simulator reads (ClusterSpec's
// AttentionCurve), as kernel "parallax". Each timed call follows two 8,192^3 GEMMs, as attention
// follows the QKV GEMM in a step, so it runs at the clock the power limit holds under GEMM load
// rather than at the boost clock of an idle GPU. The same calls alone are recorded beside
// (fwd_alone_tflops, bwd_alone_tflops): on one H200 the two differed by -9% to +22% with no
// consistent sign, as much as two machines' alone rates did (14-15% at 2k).
nlohmann::json measure_attention_curve(int d, const std::vector<int>& seq_lens) {
  nlohmann::json curve = {{"kernel", "parallax"}, {"head_dim", d}, {"seq_len", nlohmann::json::array()},
                          {"fwd_tflops", nlohmann::json::array()}, {"bwd_tflops", nlohmann::json::array()},
                          {"fwd_alone_tflops", nlohmann::json::array()}, {"bwd_alone_tflops", nlohmann::json::array()}};
  const int g = 8192;
  DeviceArray<cu::bf16> ga = random_array<cu::bf16>(int64_t{g} * g, 13), gb = random_array<cu::bf16>(int64_t{g} * g, 14),
                        gc(int64_t{g} * g);
  const auto gemm_load = [&] {
    for (int i = 0; i < 2; ++i) cu::matmul_forward<cu::bf16>(gc.data(), ga.data(), gb.data(), nullptr, g, g, g);
  };
  for (int t : seq_lens) {
    const kernels::AttentionShape s{std::max(1, 16384 / t), t, 2048 / d, 2048 / d, d};
    const int64_t n = int64_t{s.b} * s.t * s.h * s.d;
    DeviceArray<cu::bf16> q = random_array<cu::bf16>(n, 7), k = random_array<cu::bf16>(n, 8), v = random_array<cu::bf16>(n, 9),
                          o(n), dout = random_array<cu::bf16>(n, 10), dq(n), dk(n), dv(n);
    DeviceArray<float> lse(int64_t{s.b} * s.h * s.t);
    const auto fwd = [&] { cu::flash_attention_forward<cu::bf16>(o.data(), lse.data(), q.data(), k.data(), v.data(), s); };
    const auto bwd = [&] {
      cu::flash_attention_backward<cu::bf16>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                             o.data(), lse.data(), s);
    };
    const double flops = 2.0 * s.b * double(s.t) * s.t * s.h * s.d;
    curve["seq_len"].push_back(t);
    curve["fwd_tflops"].push_back(flops / time_median(7, fwd, gemm_load) / 1e12);
    curve["bwd_tflops"].push_back(2.5 * flops / time_median(7, bwd, gemm_load) / 1e12);
    curve["fwd_alone_tflops"].push_back(flops / time_median(5, fwd) / 1e12);
    curve["bwd_alone_tflops"].push_back(2.5 * flops / time_median(5, bwd) / 1e12);
  }
  return curve;
}

// Replaces the base's "parallax" attention curves (the runtime's own kernel) with the measured
// ones; the frameworks' curves (fa2, fa3, cudnn) stay as the base has them.
void set_attention_curves(nlohmann::json& gpu, const nlohmann::json& curves, const std::string& how) {
  nlohmann::json& a = gpu["attention"];
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& c : a.value("curves", nlohmann::json::array()))
    if (c.value("kernel", "") != "parallax") kept.push_back(c);
  for (const auto& c : curves) kept.push_back(c);
  a["curves"] = kept;
  a["source"] = a.value("source", std::string()) + " parallax: the runtime's own kernel, " + how + ".";
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
    const double optimizer = measure_optimizer(o.quick);
    const std::vector<int> seqs = o.quick ? std::vector<int>{1024, 4096} : std::vector<int>{1024, 2048, 4096, 8192, 16384};
    const nlohmann::json curves = {measure_attention_curve(64, seqs), measure_attention_curve(128, seqs)};
    const nlohmann::json launch = measure_launch_gap();
    const nlohmann::json sustained = o.sustained_s > 0 ? measure_sustained(o.sustained_s) : nlohmann::json();
    // The sweep's GEMMs run for milliseconds; a training run's for hours, at the clocks its power
    // limit allows: the sustained end rate over the start rate scales the fitted efficiency.
    double hold = 1;
    if (!sustained.is_null() && sustained["first_5s_tflops"].get<double>() > 0)
      hold = std::min(1.0, sustained["last_5s_tflops"].get<double>() / sustained["first_5s_tflops"].get<double>());
    const std::string how = "measured by parallax calibrate --device cuda" + std::string(o.quick ? " --quick" : "") +
                            " on one " + cu::device_name();
    nlohmann::json& g = c["gpu"];
    set_attention_curves(g, curves, how);
    g["memory_efficiency"] = std::min(1.0, elementwise / hbm);
    g["optimizer_efficiency"] = std::min(1.0, optimizer / hbm);
    g["measured"] = {{"best_bf16_gemm_tflops", gemm.best_flops / 1e12}, {"sustained_over_burst", hold},
                     {"copy_gbps", copy / 1e9}, {"elementwise_gbps", elementwise / 1e9},
                     {"optimizer_gbps", optimizer / 1e9}, {"launch_gap", launch}, {"sustained", sustained},
                     {"gemm_bf16_m_n_k_tflops", gemm.rows}};
    g["source"] = how + ": efficiencies relative to the datasheet peak " + std::to_string(peak / 1e12) +
                  " TFLOP/s and " + std::to_string(hbm / 1e9) + " GB/s; bf16 GEMM grid (cuBLASLt; gemm_grid, and the curve " +
                  "fitted to it, time-weighted), scaled by the sustained over the burst rate; attention curves of the runtime's own kernel; " +
                  "layernorm + GELU; AdamW with bf16 copy";
    c["name"] = o.name;
    // The public-runs calibration prices frameworks' sustained rates and host gaps; these rates
    // are this GPU's own, measured: applying it too would count the sustained loss twice.
    c.erase("calibration");
    c["source"] = how + "; node, network and host sections kept from " + base.value("name", std::string("the base")) +
                  " (one GPU cannot measure collectives)";
  } catch (const std::exception& e) {
    return Error{std::string("calibrate --device cuda: ") + e.what()};
  }
  return c;
}

}  // namespace parallax
