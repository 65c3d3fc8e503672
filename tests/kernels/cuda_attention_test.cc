// The fused CUDA attention (kernels/cuda/attention.h) against its CPU reference
// (kernels::flash_attention_forward / _backward): every storage type, MHA, GQA and MQA, the
// tensor-core head dims (64, 128) and a fallback one (40), sequence lengths that are not multiples
// of the 64-row tile, and one long sequence that must not allocate O(T^2) memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"       // the CPU reference kernels::flash_attention_*
#include "kernels/cuda/attention.h"  // cuda::flash_attention_*
#include "kernels/cuda/common.h"     // cuda::device_available, cuda::check
#include "cuda_test_util.h"

namespace parallax::kernels {
namespace {

using namespace cuda_test;  // NOLINT(build/namespaces): the helpers are this test's vocabulary

// All bits set is NaN in fp32, bf16 and fp16: an element the kernel fails to write shows.
template <class T>
void fill_nan(const DeviceArray<T>& x, size_t n) {
  cuda::check(cudaMemset(x.get(), 0xff, n * sizeof(T)), "cudaMemset");
}

double rms_of(const Vec& x) {
  double sum_sq = 0;
  for (const float v : x) sum_sq += double(v) * v;
  return x.empty() ? 0 : std::sqrt(sum_sq / static_cast<double>(x.size()));
}

// |gpu - ref| <= tol (|ref| + rms(ref)) elementwise: expect_close with rtol = tol and the terms'
// scale estimated by rms(ref), tol = 8 u_T + 32 u_32 sqrt(n). Looser than cuda_test::rtol, which
// is for one reduction: attention chains several, through exp.
//
// Why. GPU and reference get identical inputs (rounded to T; the backward also the same O, rounded
// to T as the GPU stores it, and the same lse), so the difference is the GPU's own rounding, the
// reference being exact to fp32 (double accumulation):
//  - T rounding: every term of a reduction is rounded to T once (P before P V and P^T dO, dS before
//    dS K and dS^T Q) and every output once, relative error <= u_T each. The terms' errors have
//    random signs, so a sum's error is ~u_T sqrt(sum of squared terms): the size of |ref| for a
//    random-sign sum, and of a typical output where a sum cancels (hence the rms(ref) term, the
//    absolute tolerance). Two roundings per term and a ~4 sigma tail over ~10^5 elements: 8 u_T.
//  - fp32 arithmetic: a score is a D-term dot product whose error grows like u_32 sqrt(D) times its
//    magnitude, and it enters P through exp, so as a relative error of P, amplified by the scores'
//    spread (up to ~4 sigma); the backward chains three such reductions (scores, dP, the sum over
//    keys or queries) before sums that cancel: ~u_32 sqrt(n), n the longest reduction, times ~32.
// A host emulation of the tensor-core tiling (same rounding points) peaked at 0.5 of this bound
// for bf16 and fp16 and at 0.45 with fp32 storage (170 u_32 at n = 128). For bf16 the bound is 3%
// of (|ref| + rms), fp16 0.4%, fp32 ~4e-5; a wrong mask, index or scale is off by O(1).
double tolerance(double unit_roundoff, const AttentionShape& s) {
  const int n = std::max({s.t, s.d, s.t * (s.h / s.kvh)});
  return 8.0 * unit_roundoff + 32.0 * kUnitRoundoff<float> * std::sqrt(static_cast<double>(n));
}

// `floor`: the size of the terms when the result cancels to ~0 everywhere (rms(ref) then says
// nothing about the rounding of the terms).
void expect_near_reference(const char* what, const Vec& gpu, const Vec& ref, double tol, double floor = 0) {
  expect_close(what, gpu, ref, tol, std::max(rms_of(ref), floor));
}

template <class T>
void expect_matches_reference(AttentionShape s, unsigned seed) {
  const long qn = long(s.b) * s.t * s.h * s.d, kn = long(s.b) * s.t * s.kvh * s.d, rows = long(s.b) * s.h * s.t;
  // q at scale 2 makes scores ~N(0, 4): peaked rows, so the online softmax's rescaling matters.
  const Vec q = random_normal<T>(qn, seed, 2.0f), k = random_normal<T>(kn, seed + 1),
            v = random_normal<T>(kn, seed + 2), dout = random_normal<T>(qn, seed + 3);
  const double tol = tolerance(kUnitRoundoff<T>, s), lse_tol = tolerance(0.0, s);  // lse is stored in fp32

  Vec out_ref(qn), lse_ref(rows);
  kernels::flash_attention_forward(out_ref.data(), lse_ref.data(), q.data(), k.data(), v.data(), s);
  DeviceArray<T> d_q(to_storage<T>(q)), d_k(to_storage<T>(k)), d_v(to_storage<T>(v)), d_out(qn);
  DeviceArray<float> d_lse(rows);
  fill_nan(d_out, qn);
  fill_nan(d_lse, rows);
  cuda::flash_attention_forward(d_out.get(), d_lse.get(), d_q.get(), d_k.get(), d_v.get(), s);
  expect_near_reference("out", download_f32(d_out), out_ref, tol);
  expect_near_reference("lse", download_f32(d_lse), lse_ref, lse_tol);

  const Vec out_t = rounded<T>(out_ref);
  Vec dq_ref(qn), dk_ref(kn), dv_ref(kn);
  kernels::flash_attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(), k.data(),
                                    v.data(), out_t.data(), lse_ref.data(), s);
  DeviceArray<T> d_dout(to_storage<T>(dout)), d_out_t(to_storage<T>(out_t)), d_dq(qn), d_dk(kn), d_dv(kn);
  d_lse.upload(lse_ref);
  fill_nan(d_dq, qn);
  fill_nan(d_dk, kn);
  fill_nan(d_dv, kn);
  cuda::flash_attention_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_q.get(), d_k.get(), d_v.get(),
                                 d_out_t.get(), d_lse.get(), s);
  // dQ = scale dS K and dK = scale dS^T Q with dS = P (dP - D): where every row holds one key (the
  // one-token case) P = 1 and dP = D, so dQ and dK are exactly 0 in the reference and the GPU's
  // are rounding of dP - D, whose terms are |dO| |V| sqrt(D) in size; times |K| (|Q|) and the
  // scale 1 / sqrt(D) that is the floor: rms(dO) rms(V) rms(K) (rms(Q)).
  const double dp_size = rms_of(dout) * rms_of(v);
  expect_near_reference("dq", download_f32(d_dq), dq_ref, tol, dp_size * rms_of(k));
  expect_near_reference("dk", download_f32(d_dk), dk_ref, tol, dp_size * rms_of(q));
  expect_near_reference("dv", download_f32(d_dv), dv_ref, tol);
}

template <class T>
class CudaFlashAttention : public ::testing::Test {};
TYPED_TEST_SUITE(CudaFlashAttention, StorageTypes, TypeNames);

// bf16 and fp16 with D = 64 or 128 take the tensor-core kernels, everything else the fallback.
TYPED_TEST(CudaFlashAttention, MatchesCpuReference) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const AttentionShape shapes[] = {
      {2, 77, 2, 2, 64},   // MHA, one full and one partial tile
      {2, 200, 4, 2, 64},  // GQA (2 query heads per KV head), 4 tiles, the last partial
      {2, 200, 2, 2, 128},
      {2, 77, 4, 2, 128},
      {1, 130, 4, 1, 64},  // MQA: one KV head for four query heads
      {1, 64, 2, 2, 128},  // exactly one tile
      {1, 1, 1, 1, 64},    // one token
      {2, 77, 2, 2, 40},   // fallback head dim
      {2, 200, 4, 2, 40},
  };
  unsigned seed = 100;
  for (const AttentionShape& s : shapes) {
    SCOPED_TRACE("b " + std::to_string(s.b) + " t " + std::to_string(s.t) + " h " + std::to_string(s.h) + " kvh " +
                 std::to_string(s.kvh) + " d " + std::to_string(s.d));
    expect_matches_reference<TypeParam>(s, seed += 10);
  }
}

// One query row of the reference in double: out[i] and lse for (b = 0, head h, query t).
void reference_row(const Vec& q, const Vec& k, const Vec& v, AttentionShape s, int h, int t, Vec& out, double& lse) {
  const int kv_head = h / (s.h / s.kvh);
  const double scale = 1.0 / std::sqrt(double(s.d));
  std::vector<double> score(t + 1);
  double max = -INFINITY;
  for (int u = 0; u <= t; ++u) {
    double dot = 0;
    for (int i = 0; i < s.d; ++i) dot += double(q[(long(t) * s.h + h) * s.d + i]) * k[(long(u) * s.kvh + kv_head) * s.d + i];
    score[u] = dot * scale;
    max = std::max(max, score[u]);
  }
  double sum = 0;
  std::vector<double> acc(s.d, 0.0);
  for (int u = 0; u <= t; ++u) {
    const double p = std::exp(score[u] - max);
    sum += p;
    for (int i = 0; i < s.d; ++i) acc[i] += p * v[(long(u) * s.kvh + kv_head) * s.d + i];
  }
  out.resize(s.d);
  for (int i = 0; i < s.d; ++i) out[i] = static_cast<float>(acc[i] / sum);
  lse = max + std::log(sum);
}

// T = 4096: the scores of one head alone would be 64 MiB in fp32. Nothing of that order may be
// allocated (device memory and the stream-ordered pool's high watermark, after a warm-up so that
// module loading and local-memory reservations are not counted), results are finite, and a few
// rows spread over the 64 key tiles match the reference.
TEST(CudaFlashAttentionLong, LinearMemoryAndFiniteResults) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const AttentionShape s{1, 4096, 2, 2, 128};
  const long n = long(s.t) * s.h * s.d, rows = long(s.h) * s.t;
  const Vec q = random_normal<bf16>(n, 7, 2.0f), k = random_normal<bf16>(n, 8), v = random_normal<bf16>(n, 9),
            dout = random_normal<bf16>(n, 10);
  DeviceArray<bf16> d_q(to_storage<bf16>(q)), d_k(to_storage<bf16>(k)), d_v(to_storage<bf16>(v)),
      d_dout(to_storage<bf16>(dout)), d_out(n), d_dq(n), d_dk(n), d_dv(n);
  DeviceArray<float> d_lse(rows);
  auto run = [&](AttentionShape shape) {
    cuda::flash_attention_forward(d_out.get(), d_lse.get(), d_q.get(), d_k.get(), d_v.get(), shape);
    cuda::flash_attention_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_q.get(), d_k.get(), d_v.get(),
                                   d_out.get(), d_lse.get(), shape);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  };
  run({1, 64, 2, 2, 128});  // warm-up: a prefix of the same tensors, the same kernels

  int device = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  cudaMemPool_t pool;
  cuda::check(cudaDeviceGetMemPool(&pool, device), "cudaDeviceGetMemPool");
  std::uint64_t zero = 0, pool_high = 0;
  cuda::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "reset pool high watermark");
  size_t free_before = 0, free_after = 0, total = 0;
  cuda::check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
  run(s);
  cuda::check(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
  cuda::check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &pool_high), "pool high watermark");
  const double quadratic = double(s.t) * s.t * sizeof(float);
  // Other processes may allocate meanwhile, so device memory gets a looser bound than the pool.
  EXPECT_LT(double(free_before) - double(free_after), quadratic / 2);
  EXPECT_LT(double(pool_high), quadratic / 16);  // D = rowsum(dO * O) is 32 KiB

  const Vec out = download_f32(d_out), lse = download_f32(d_lse);
  for (const Vec& x : {out, lse, download_f32(d_dq), download_f32(d_dk), download_f32(d_dv)})
    for (const float y : x) ASSERT_TRUE(std::isfinite(y));
  const double tol = tolerance(kUnitRoundoff<bf16>, s);
  for (const int h : {0, 1})
    for (const int t : {0, 63, 64, 1000, 4095}) {
      Vec ref;
      double ref_lse = 0;
      reference_row(q, k, v, s, h, t, ref, ref_lse);
      const Vec gpu(out.begin() + (long(t) * s.h + h) * s.d, out.begin() + (long(t) * s.h + h + 1) * s.d);
      SCOPED_TRACE("head " + std::to_string(h) + " query " + std::to_string(t));
      expect_near_reference("out row", gpu, ref, tol);
      EXPECT_NEAR(lse[long(h) * s.t + t], ref_lse, tolerance(0.0, s) * (std::abs(ref_lse) + 1));
    }
}

}  // namespace
}  // namespace parallax::kernels
