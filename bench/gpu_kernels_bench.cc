// GPU kernel speed against the machine's ceilings: the bf16 GEMM (cuBLASLt) and device copy that
// bound everything else (about 790 TFLOP/s and 4.3 TB/s measured on an H200), and
// the runtime's own kernels — fused attention, layernorm, GELU, AdamW. Timing protocol (as
// nccl-tests): CUDA events around each iteration after Google Benchmark's warm-up, random inputs,
// manual time. Bandwidth counts bytes read plus written; attention FLOPs count the causal half
// the kernel computes (forward 2 b s^2 H D, backward 2.5 x that). Skips without a device.
#include <benchmark/benchmark.h>

#include <functional>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/norm.h"
#include "runtime/cuda/device_allocator.h"

namespace parallax {
namespace {

namespace cu = kernels::cuda;

// Times f with CUDA events per iteration; returns false (and marks the run skipped) without a GPU.
bool run(benchmark::State& state, const std::function<void()>& f) {
  if (!cu::device_available()) {
    state.SkipWithError("no CUDA device");
    return false;
  }
  cudaEvent_t a = nullptr, b = nullptr;
  cudaEventCreate(&a), cudaEventCreate(&b);
  f();  // first-use costs (cuBLASLt heuristics, module loading) stay out of the timings
  for (auto _ : state) {
    cudaEventRecord(a), f(), cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    state.SetIterationTime(ms * 1e-3);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  return true;
}

template <class T>
DeviceArray<T> random_array(int64_t n, uint64_t seed) {
  DeviceArray<T> x(n);
  cu::fill_uniform(x.data(), n, seed, 1.0f);
  return x;
}

void rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] = benchmark::Counter(per_iteration * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_GemmBf16(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const int d = static_cast<int>(state.range(0));
  DeviceArray<cu::bf16> x = random_array<cu::bf16>(int64_t{d} * d, 1), w = random_array<cu::bf16>(int64_t{d} * d, 2), y(int64_t{d} * d);
  if (run(state, [&] { cu::matmul_forward<cu::bf16>(y.data(), x.data(), w.data(), nullptr, d, d, d); }))
    rate(state, "FLOP/s", 2.0 * d * double(d) * d);
}
BENCHMARK(BM_GemmBf16)->Arg(2048)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_CopyDeviceToDevice(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const int64_t bytes = state.range(0) << 20;
  DeviceArray<char> a(bytes), b(bytes);
  cudaMemset(a.data(), 1, bytes);
  if (run(state, [&] { cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice); }))
    rate(state, "bytes/s", 2.0 * double(bytes));
}
BENCHMARK(BM_CopyDeviceToDevice)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);

// GPT-1.3B's attention per micro-batch of 8: s 2048, 16 heads of 128 (range(1): 0 forward, 1 both).
void BM_FlashAttentionBf16(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const kernels::AttentionShape s{static_cast<int>(state.range(0)), 2048, 16, 16, 128};
  const bool backward = state.range(1) == 1;
  const int64_t n = int64_t{s.b} * s.t * s.h * s.d;
  DeviceArray<cu::bf16> q = random_array<cu::bf16>(n, 3), k = random_array<cu::bf16>(n, 4), v = random_array<cu::bf16>(n, 5),
                        o(n), dout = random_array<cu::bf16>(n, 6), dq(n), dk(n), dv(n);
  DeviceArray<float> lse(int64_t{s.b} * s.h * s.t);
  cu::flash_attention_forward<cu::bf16>(o.data(), lse.data(), q.data(), k.data(), v.data(), s);
  const bool ok = run(state, [&] {
    if (!backward) cu::flash_attention_forward<cu::bf16>(o.data(), lse.data(), q.data(), k.data(), v.data(), s);
    else cu::flash_attention_backward<cu::bf16>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                                v.data(), o.data(), lse.data(), s);
  });
  if (ok) rate(state, "FLOP/s", (backward ? 2.5 : 1.0) * 2.0 * s.b * double(s.t) * s.t * s.h * s.d);
}
BENCHMARK(BM_FlashAttentionBf16)->Args({8, 0})->Args({8, 1})->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_LayerNormBf16(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const int n = 16384, c = 2048;
  DeviceArray<cu::bf16> x = random_array<cu::bf16>(int64_t{n} * c, 7), y(int64_t{n} * c), w = random_array<cu::bf16>(c, 8);
  DeviceArray<float> mean(n), rstd(n);
  if (run(state, [&] { cu::layernorm_forward<cu::bf16>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, n, c); }))
    rate(state, "bytes/s", 2.0 * n * double(c) * sizeof(cu::bf16));
}
BENCHMARK(BM_LayerNormBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_GeluBf16(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const int64_t n = int64_t{16384} * 8192;
  DeviceArray<cu::bf16> x = random_array<cu::bf16>(n, 9), y(n);
  if (run(state, [&] { cu::gelu_forward<cu::bf16>(y.data(), x.data(), n); }))
    rate(state, "bytes/s", 2.0 * double(n) * sizeof(cu::bf16));
}
BENCHMARK(BM_GeluBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

// AdamW over 256M parameters with the bf16 copy: 30 bytes per parameter.
void BM_AdamWBf16Copy(benchmark::State& state) {
  if (!cu::device_available()) return state.SkipWithError("no CUDA device");
  const int64_t n = int64_t{256} << 20;
  DeviceArray<float> p = random_array<float>(n, 10), g = random_array<float>(n, 11), m(n), v(n);
  DeviceArray<cu::bf16> copy(n);
  cudaMemset(m.data(), 0, n * 4), cudaMemset(v.data(), 0, n * 4);
  int step = 0;
  if (run(state, [&] { cu::adamw_update<cu::bf16>(p.data(), copy.data(), g.data(), m.data(), v.data(), n, {}, ++step); }))
    rate(state, "bytes/s", 30.0 * double(n));
}
BENCHMARK(BM_AdamWBf16Copy)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace parallax

BENCHMARK_MAIN();
