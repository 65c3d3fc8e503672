// CUDA layer kernels (norms, activations, rope, embedding, cross-entropy) against their CPU
// references (kernels/*.h) on the same inputs, for fp32, bf16 and fp16 storage. Inputs are drawn
// in fp32, rounded to the storage type, and the CPU reference runs in fp32 on exactly the rounded
// values, so what differs is only the GPU's own arithmetic and the rounding of its outputs; see
// rtol() in cuda_test_util.h for the tolerance this allows.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"              // DeviceArray, to_storage / rounded, rtol, expect_close
#include "kernels/activation.h"          // CPU gelu / swiglu
#include "kernels/cross_entropy.h"       // CPU row_max ... cross_entropy_backward
#include "kernels/cuda/activation.h"     // cuda::gelu_*, swiglu_*
#include "kernels/cuda/common.h"         // cuda::device_available
#include "kernels/cuda/cross_entropy.h"  // cuda cross-entropy pieces and the fused form
#include "kernels/cuda/embedding.h"      // cuda::embedding_*
#include "kernels/cuda/norm.h"           // cuda::layernorm_*, rmsnorm_*
#include "kernels/cuda/rope.h"           // cuda::rope_*
#include "kernels/embedding.h"           // CPU embedding_*
#include "kernels/norm.h"                // CPU layernorm_*, rmsnorm_*
#include "kernels/rope.h"                // CPU rope_*

namespace parallax::kernels {
namespace {

using namespace cuda_test;  // NOLINT(build/namespaces): the helpers are this test's vocabulary

template <class T>
class CudaLayerKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaLayerKernelTest, StorageTypes, TypeNames);

// --- norms -------------------------------------------------------------------------------------------

// Shapes: a packed row (c = 256) with one row per block, and rows that are not whole 16-byte packs
// for 16-bit types (c = 100) with more rows than resident blocks, so each block loops over rows.
TYPED_TEST(CudaLayerKernelTest, LayerNormForwardAndBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  for (const auto& [n, c] : {std::pair{37, 256}, std::pair{1500, 100}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " c " + std::to_string(c));
    const size_t nc = static_cast<size_t>(n) * c;
    const Vec x = random_normal<T>(nc, 1), w = random_normal<T>(c, 2), b = random_normal<T>(c, 3);
    const Vec dout = random_normal<T>(nc, 4), dinp0 = random_normal<T>(nc, 5);
    const Vec dw0 = random_normal<float>(c, 6), db0 = random_normal<float>(c, 7);
    Vec y(nc), mean(n), rstd(n), dinp = dinp0, dw = dw0, db = db0;
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), n,
                       c);

    DeviceArray<T> x_dev(to_storage<T>(x)), w_dev(to_storage<T>(w)), b_dev(to_storage<T>(b)), y_dev(nc);
    DeviceArray<float> mean_dev(n), rstd_dev(n);
    cuda::layernorm_forward(y_dev.get(), mean_dev.get(), rstd_dev.get(), x_dev.get(), w_dev.get(), b_dev.get(), n, c);
    expect_close("out", download_f32(y_dev), y, rtol<T>(c));
    expect_close("mean", mean_dev.download(), mean, rtol<float>(c), max_abs(x));
    expect_close("rstd", rstd_dev.download(), rstd, rtol<float>(c));

    // The backward gets the CPU's statistics so that it is checked on its own.
    DeviceArray<T> dout_dev(to_storage<T>(dout)), dinp_dev(to_storage<T>(dinp0));
    DeviceArray<float> cpu_mean_dev(mean), cpu_rstd_dev(rstd), dw_dev(dw0), db_dev(db0);
    cuda::layernorm_backward(dinp_dev.get(), dw_dev.get(), db_dev.get(), dout_dev.get(), x_dev.get(), w_dev.get(),
                             cpu_mean_dev.get(), cpu_rstd_dev.get(), n, c);
    expect_close("dinp", download_f32(dinp_dev), dinp, rtol<T>(c));
    expect_close("dweight", dw_dev.download(), dw, rtol<float>(n));
    expect_close("dbias", db_dev.download(), db, rtol<float>(n));
  }
}

TYPED_TEST(CudaLayerKernelTest, RmsNormForwardAndBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  for (const auto& [n, c] : {std::pair{37, 256}, std::pair{1500, 100}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " c " + std::to_string(c));
    const size_t nc = static_cast<size_t>(n) * c;
    const Vec x = random_normal<T>(nc, 11), w = random_normal<T>(c, 12), dout = random_normal<T>(nc, 13);
    const Vec dinp0 = random_normal<T>(nc, 14), dw0 = random_normal<float>(c, 15);
    Vec y(nc), rrms(n), dinp = dinp0, dw = dw0;
    rmsnorm_forward(y.data(), rrms.data(), x.data(), w.data(), n, c);
    rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rrms.data(), n, c);

    DeviceArray<T> x_dev(to_storage<T>(x)), w_dev(to_storage<T>(w)), y_dev(nc);
    DeviceArray<float> rrms_dev(n);
    cuda::rmsnorm_forward(y_dev.get(), rrms_dev.get(), x_dev.get(), w_dev.get(), n, c);
    expect_close("out", download_f32(y_dev), y, rtol<T>(c));
    expect_close("rrms", rrms_dev.download(), rrms, rtol<float>(c));

    DeviceArray<T> dout_dev(to_storage<T>(dout)), dinp_dev(to_storage<T>(dinp0));
    DeviceArray<float> cpu_rrms_dev(rrms), dw_dev(dw0);
    cuda::rmsnorm_backward(dinp_dev.get(), dw_dev.get(), dout_dev.get(), x_dev.get(), w_dev.get(), cpu_rrms_dev.get(),
                           n, c);
    expect_close("dinp", download_f32(dinp_dev), dinp, rtol<T>(c));
    expect_close("dweight", dw_dev.download(), dw, rtol<float>(n));
  }
}

// --- activations -------------------------------------------------------------------------------------

// Pointwise formulas with a transcendental: "terms" 16 stands for the dozen roundings and the
// 2-ulp tanhf/expf. Backward passes accumulate into a nonzero dinp, or overwrite a NaN one.
TYPED_TEST(CudaLayerKernelTest, GeluForwardAndBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  for (const long n : {4096L, 999L}) {  // packed, and a length with no whole packs
    const Vec x = random_normal<T>(n, 21, 2.0f), dout = random_normal<T>(n, 22), dinp0 = random_normal<T>(n, 23);
    Vec y(n), dinp = dinp0;
    gelu_forward(y.data(), x.data(), n);
    gelu_backward(dinp.data(), x.data(), dout.data(), n);
    DeviceArray<T> x_dev(to_storage<T>(x)), y_dev(n), dout_dev(to_storage<T>(dout)), dinp_dev(to_storage<T>(dinp0));
    cuda::gelu_forward(y_dev.get(), x_dev.get(), n);
    cuda::gelu_backward(dinp_dev.get(), x_dev.get(), dout_dev.get(), n);
    expect_close("gelu", download_f32(y_dev), y, rtol<T>(16));
    expect_close("gelu dinp", download_f32(dinp_dev), dinp, rtol<T>(16));
    // accumulate = false overwrites: the NaN left in dinp must not show.
    Vec fresh(n, 0.0f);
    gelu_backward(fresh.data(), x.data(), dout.data(), n);
    cuda::check(cudaMemset(dinp_dev.get(), 0xff, n * sizeof(T)), "cudaMemset");
    cuda::gelu_backward(dinp_dev.get(), x_dev.get(), dout_dev.get(), n, /*accumulate=*/false);
    expect_close("gelu dinp (overwrite)", download_f32(dinp_dev), fresh, rtol<T>(16));
  }
}

TYPED_TEST(CudaLayerKernelTest, SwigluForwardAndBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  for (const int f : {64, 30}) {  // packed, and rows that are not whole packs
    const int n = 7;
    const Vec x = random_normal<T>(2L * n * f, 31, 2.0f), dout = random_normal<T>(1L * n * f, 32);
    const Vec dinp0 = random_normal<T>(2L * n * f, 33);
    Vec y(1L * n * f), dinp = dinp0;
    swiglu_forward(y.data(), x.data(), n, f);
    swiglu_backward(dinp.data(), x.data(), dout.data(), n, f);
    DeviceArray<T> x_dev(to_storage<T>(x)), y_dev(1L * n * f), dout_dev(to_storage<T>(dout));
    DeviceArray<T> dinp_dev(to_storage<T>(dinp0));
    cuda::swiglu_forward(y_dev.get(), x_dev.get(), n, f);
    cuda::swiglu_backward(dinp_dev.get(), x_dev.get(), dout_dev.get(), n, f);
    expect_close("swiglu", download_f32(y_dev), y, rtol<T>(16));
    expect_close("swiglu dinp", download_f32(dinp_dev), dinp, rtol<T>(16));
    Vec fresh(2L * n * f, 0.0f);
    swiglu_backward(fresh.data(), x.data(), dout.data(), n, f);
    cuda::check(cudaMemset(dinp_dev.get(), 0xff, 2L * n * f * sizeof(T)), "cudaMemset");
    cuda::swiglu_backward(dinp_dev.get(), x_dev.get(), dout_dev.get(), n, f, /*accumulate=*/false);
    expect_close("swiglu dinp (overwrite)", download_f32(dinp_dev), fresh, rtol<T>(16));
  }
}

// --- rope ----------------------------------------------------------------------------------------------

// Positions up to 999 give angles of hundreds of radians: the GPU's fp64 range reduction must match
// the CPU's fp64 angle. Forward then backward must also return (within rounding) the input.
TYPED_TEST(CudaLayerKernelTest, RopeForwardAndBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int b = 2, t = 1000, h = 3, d = 32;
  const float base = 10000.0f;
  const size_t n = static_cast<size_t>(b) * t * h * d;
  const Vec x = random_normal<T>(n, 41);
  Vec fwd = x;
  rope_forward(fwd.data(), b, t, h, d, d, base);
  DeviceArray<T> x_dev(to_storage<T>(x));
  cuda::rope_forward(x_dev.get(), b, t, h, d, base);
  expect_close("rope forward", download_f32(x_dev), fwd, rtol<T>(16));

  const Vec g = random_normal<T>(n, 42);
  Vec bwd = g;
  rope_backward(bwd.data(), b, t, h, d, d, base);
  DeviceArray<T> g_dev(to_storage<T>(g));
  cuda::rope_backward(g_dev.get(), b, t, h, d, base);
  expect_close("rope backward", download_f32(g_dev), bwd, rtol<T>(16));

  cuda::rope_backward(x_dev.get(), b, t, h, d, base);  // undoes the forward
  expect_close("rope round trip", download_f32(x_dev), x, 2 * rtol<T>(16));
}

// --- embedding -----------------------------------------------------------------------------------------

// A vocab shard [50, 90) of a 120-token vocabulary: most tokens fall outside and must embed to zero
// (plus positions where added). The position gradient is a fixed-order sum, bit-identical to the
// CPU; the token gradient's atomics only reorder fp32 additions (terms: up to n of one row).
TYPED_TEST(CudaLayerKernelTest, EmbeddingVocabShard) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int t = 16, n = 4 * t, vocab_start = 50, vocab_local = 40;
  std::mt19937 rng(51);
  std::uniform_int_distribution<int> token(0, 119);
  std::vector<int> tokens(n);
  for (int& k : tokens) k = token(rng);
  const DeviceArray<int> tokens_dev(tokens);
  for (const int c : {64, 60}) {  // packed, and rows that are not whole packs for 16-bit types
    SCOPED_TRACE("c " + std::to_string(c));
    const Vec wte = random_normal<T>(1L * vocab_local * c, 52), wpe = random_normal<T>(1L * t * c, 53);
    DeviceArray<T> wte_dev(to_storage<T>(wte)), wpe_dev(to_storage<T>(wpe)), out_dev(1L * n * c);
    for (const bool add_positions : {true, false}) {
      Vec out(1L * n * c);
      embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), n, t, c, vocab_start, vocab_local,
                        add_positions);
      cuda::embedding_forward(out_dev.get(), tokens_dev.get(), wte_dev.get(), wpe_dev.get(), n, t, c, vocab_start,
                              vocab_local, add_positions);
      expect_close(add_positions ? "out (positions)" : "out", download_f32(out_dev), out, rtol<T>(1));
    }

    const Vec dout = random_normal<T>(1L * n * c, 54), dwte0 = random_normal<float>(1L * vocab_local * c, 55);
    const Vec dwpe0 = random_normal<float>(1L * t * c, 56);
    Vec dwte = dwte0, dwpe = dwpe0;
    embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), n, t, c, vocab_start, vocab_local);
    DeviceArray<T> dout_dev(to_storage<T>(dout));
    DeviceArray<float> dwte_dev(dwte0), dwpe_dev(dwpe0);
    cuda::embedding_backward(dwte_dev.get(), dwpe_dev.get(), dout_dev.get(), tokens_dev.get(), n, t, c, vocab_start,
                             vocab_local);
    expect_close("dwte", dwte_dev.download(), dwte, rtol<float>(n));
    EXPECT_EQ(dwpe_dev.download(), dwpe) << "dwpe";

    // Without a position table (rotary models) only the token gradient accumulates.
    cuda::embedding_backward(dwte_dev.get(), nullptr, dout_dev.get(), tokens_dev.get(), n, t, c, vocab_start,
                             vocab_local);
    embedding_backward(dwte.data(), nullptr, dout.data(), tokens.data(), n, t, c, vocab_start, vocab_local);
    expect_close("dwte again", dwte_dev.download(), dwte, rtol<float>(2 * n));
  }
}

// --- cross-entropy ------------------------------------------------------------------------------------

// The vocab shard holds columns [500, 500 + v) of 2000; about half the targets fall elsewhere
// (target logit 0, no -dloss). The GPU pipeline runs on its own statistics, as the trainer does.
// Gradients are mostly tiny probabilities, so their floor scale is the mean |dlogit|.
TYPED_TEST(CudaLayerKernelTest, CrossEntropyPiecesAndFusedInPlace) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int n = 19, vocab_start = 500;
  std::mt19937 rng(61);
  std::uniform_int_distribution<int> target(0, 1999);
  std::vector<int> targets(n);
  for (int& k : targets) k = target(rng);
  const DeviceArray<int> targets_dev(targets);
  for (const int v : {1000, 999}) {  // packed, and rows that are not whole packs
    SCOPED_TRACE("v " + std::to_string(v));
    const size_t nv = static_cast<size_t>(n) * v;
    const Vec logits = random_normal<T>(nv, 62, 3.0f), dloss = random_normal<float>(n, 63);
    Vec max(n), sum_exp(n), target_logit(n), losses(n), dlogits(nv);
    row_max(max.data(), logits.data(), n, v);
    row_sum_exp_and_target(sum_exp.data(), target_logit.data(), logits.data(), max.data(), targets.data(), n, v,
                           vocab_start);
    cross_entropy_loss(losses.data(), max.data(), sum_exp.data(), target_logit.data(), n);
    cross_entropy_backward(dlogits.data(), logits.data(), max.data(), sum_exp.data(), targets.data(), dloss.data(), n,
                           v, vocab_start);

    DeviceArray<T> logits_dev(to_storage<T>(logits)), dlogits_dev(nv);
    DeviceArray<float> max_dev(n), sum_exp_dev(n), target_logit_dev(n), losses_dev(n), dloss_dev(dloss);
    cuda::row_max(max_dev.get(), logits_dev.get(), n, v);
    cuda::row_sum_exp_and_target(sum_exp_dev.get(), target_logit_dev.get(), logits_dev.get(), max_dev.get(),
                                 targets_dev.get(), n, v, vocab_start);
    cuda::cross_entropy_loss(losses_dev.get(), max_dev.get(), sum_exp_dev.get(), target_logit_dev.get(), n);
    cuda::cross_entropy_backward(dlogits_dev.get(), logits_dev.get(), max_dev.get(), sum_exp_dev.get(),
                                 targets_dev.get(), dloss_dev.get(), n, v, vocab_start);
    EXPECT_EQ(max_dev.download(), max) << "row max is exact";
    EXPECT_EQ(target_logit_dev.download(), target_logit) << "target logit is a copy";
    expect_close("sum_exp", sum_exp_dev.download(), sum_exp, rtol<float>(v));
    expect_close("losses", losses_dev.download(), losses, rtol<float>(v));
    expect_close("dlogits", download_f32(dlogits_dev), dlogits, rtol<T>(v), mean_abs(dlogits));

    // Fused, in place on the logits, one dloss for every row.
    const float dloss_all = 0.25f;
    Vec fused(nv);
    const Vec dloss_rows(n, dloss_all);
    cross_entropy_backward(fused.data(), logits.data(), max.data(), sum_exp.data(), targets.data(), dloss_rows.data(),
                           n, v, vocab_start);
    DeviceArray<float> fused_losses_dev(n);
    cuda::cross_entropy_fused(fused_losses_dev.get(), logits_dev.get(), logits_dev.get(), max_dev.get(),
                              sum_exp_dev.get(), target_logit_dev.get(), targets_dev.get(), dloss_all, n, v,
                              vocab_start);
    expect_close("fused losses", fused_losses_dev.download(), losses, rtol<float>(v));
    expect_close("fused dlogits", download_f32(logits_dev), fused, rtol<T>(v), mean_abs(fused));
  }
}

}  // namespace
}  // namespace parallax::kernels
