// CUDA precision and glue kernels (AdamW, casts, the loss scaler's inf/NaN check, elementwise)
// against their CPU references on the same inputs, for fp32, bf16 and fp16 storage: bit-exact
// where the kernel promises it (casts, copies, unscale, the AdamW compute copy), otherwise within
// rtol() of cuda_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cuda_test_util.h"            // DeviceArray, to_storage / rounded, rtol, expect_close
#include "kernels/adamw.h"             // CPU adamw_update, AdamWConfig
#include "kernels/cast.h"              // CPU to_bf16 / to_fp16 / unscale
#include "kernels/cuda/adamw.h"        // cuda::adamw_update
#include "kernels/cuda/cast.h"         // cuda casts, find_inf_or_nan, has_inf_or_nan, unscale
#include "kernels/cuda/common.h"       // cuda::device_available
#include "kernels/cuda/elementwise.h"  // cuda::add, add_bias, bias_backward, columns, fill_uniform, scale

namespace parallax::kernels {
namespace {

using namespace cuda_test;  // NOLINT(build/namespaces): the helpers are this test's vocabulary

template <class T>
class CudaPrecisionTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaPrecisionTest, StorageTypes, TypeNames);

// --- AdamW ---------------------------------------------------------------------------------------------

// Three steps on fp32 master weights, the last also writing the compute copy. The GPU update uses
// the CPU's operation order without FMA contraction, so it is bit-identical in practice; the check
// allows a few fp32 ulps. The compute copy must equal the CPU cast of the GPU's weights exactly.
TYPED_TEST(CudaPrecisionTest, AdamWMatchesCpuAndWritesComputeCopy) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const AdamWConfig cfg{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const float grad_scale = 0.5f;
  for (const long n : {4096L, 1001L}) {  // packed, and a length with no whole packs
    Vec param = random_normal<float>(n, 71), m(n, 0.0f), v(n, 0.0f);
    DeviceArray<float> param_dev(param), m_dev(m), v_dev(v), grad_dev(n);
    DeviceArray<T> copy_dev(n);
    for (int step = 1; step <= 3; ++step) {
      const Vec grad = random_normal<float>(n, 72 + step, 10.0f);
      adamw_update(param.data(), grad.data(), m.data(), v.data(), n, cfg, step, grad_scale);
      grad_dev.upload(grad);
      if (step < 3)
        cuda::adamw_update(param_dev.get(), grad_dev.get(), m_dev.get(), v_dev.get(), n, cfg, step, grad_scale);
      else
        cuda::adamw_update(param_dev.get(), copy_dev.get(), grad_dev.get(), m_dev.get(), v_dev.get(), n, cfg, step,
                           grad_scale);
    }
    const Vec gpu_param = param_dev.download();
    expect_close("param", gpu_param, param, rtol<float>(1));
    expect_close("m", m_dev.download(), m, rtol<float>(1));
    expect_close("v", v_dev.download(), v, rtol<float>(1));
    EXPECT_EQ(download_f32(copy_dev), rounded<T>(gpu_param)) << "compute copy";
  }
}

// --- casts and the loss scaler -----------------------------------------------------------------------

// Every class of input: signed zeros, infinities, NaNs with payloads, fp32 subnormals, fp16
// subnormals and their ties, overflow around 65520, bf16 and fp16 ties (1 + half an ulp, to even
// down; 1 + 3 half-ulps, to even up), then random bit patterns.
Vec cast_inputs() {
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00000,
                               0xffc00000, 0x7f800001, 0x7fc00001, 0xffa00000, 0x00800000, 0x00000001, 0x007fffff,
                               0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, 0xc788b800, 0x7f7fffff, 0x33800000,
                               0x33000000, 0x33c00000, 0x38800000, 0x387fc000, 0x387fe000, 0x3f808000, 0x3f818000,
                               0x3f801000, 0x3f803000, 0x3f7fffff, 0xbf808001};
  Vec x;
  for (uint32_t u : specials) x.push_back(from_bits(u));
  std::mt19937 rng(81);
  for (int i = 0; i < 100001; ++i) x.push_back(from_bits(static_cast<uint32_t>(rng())));
  return x;
}

TEST(CudaCast, ToSixteenBitsIsBitExact) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const Vec x = cast_inputs();
  for (const long n : {static_cast<long>(x.size()), static_cast<long>(x.size() / 4 * 4)}) {  // scalar, packed
    std::vector<uint16_t> bf(n), fp(n);
    to_bf16(bf.data(), x.data(), n);
    to_fp16(fp.data(), x.data(), n);
    DeviceArray<float> x_dev(Vec(x.begin(), x.begin() + n));
    DeviceArray<uint16_t> bf_dev(n), fp_dev(n);
    cuda::to_bf16(bf_dev.get(), x_dev.get(), n);
    cuda::to_fp16(fp_dev.get(), x_dev.get(), n);
    EXPECT_EQ(bf_dev.download(), bf) << "to_bf16, n " << n;
    EXPECT_EQ(fp_dev.download(), fp) << "to_fp16, n " << n;
  }
}

TEST(CudaCast, FromSixteenBitsIsBitExactForEveryPattern) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const long n = 65536;
  std::vector<uint16_t> all(n);
  for (long i = 0; i < n; ++i) all[i] = static_cast<uint16_t>(i);
  Vec bf(n), fp(n);
  from_bf16(bf.data(), all.data(), n);
  from_fp16(fp.data(), all.data(), n);
  DeviceArray<uint16_t> all_dev(all);
  DeviceArray<float> bf_dev(n), fp_dev(n);
  cuda::from_bf16(bf_dev.get(), all_dev.get(), n);
  cuda::from_fp16(fp_dev.get(), all_dev.get(), n);
  const Vec gpu_bf = bf_dev.download(), gpu_fp = fp_dev.download();
  for (long i = 0; i < n; ++i) {  // compared as bits: NaN != NaN
    ASSERT_EQ(bits_of(gpu_bf[i]), bits_of(bf[i])) << "from_bf16 0x" << std::hex << i;
    ASSERT_EQ(bits_of(gpu_fp[i]), bits_of(fp[i])) << "from_fp16 0x" << std::hex << i;
  }
}

TYPED_TEST(CudaPrecisionTest, TypedCastsMatchCpu) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const Vec x = cast_inputs();
  const long n = static_cast<long>(x.size());
  DeviceArray<float> x_dev(x), back_dev(n);
  DeviceArray<T> t_dev(n);
  cuda::cast_from_float<T>(t_dev.get(), x_dev.get(), n);
  cuda::cast_to_float<T>(back_dev.get(), t_dev.get(), n);
  const std::vector<T> gpu = t_dev.download(), cpu = to_storage<T>(x);
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n * sizeof(T)), 0) << "cast_from_float bits";
  const Vec gpu_back = back_dev.download(), cpu_back = to_f32(cpu);
  EXPECT_EQ(std::memcmp(gpu_back.data(), cpu_back.data(), n * sizeof(float)), 0) << "cast_to_float bits";
}

TEST(CudaCast, InfNanFlagAndUnscale) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const long n : {4096L, 1003L}) {  // packed, and a length with no whole packs
    const Vec x = random_normal<float>(n, 91, 1e4f);
    DeviceArray<float> x_dev(x);
    DeviceArray<int> flag_dev(std::vector<int>{0});
    cuda::find_inf_or_nan(flag_dev.get(), x_dev.get(), n);
    EXPECT_EQ(flag_dev.download()[0], 0);
    EXPECT_FALSE(cuda::has_inf_or_nan(x_dev.get(), n));

    Vec bad = x;
    bad[n - 1] = std::numeric_limits<float>::infinity();  // the last element: the tail of the pack loop
    x_dev.upload(bad);
    cuda::find_inf_or_nan(flag_dev.get(), x_dev.get(), n);
    EXPECT_EQ(flag_dev.download()[0], 1);
    EXPECT_TRUE(cuda::has_inf_or_nan(x_dev.get(), n));
    bad[n - 1] = x[n - 1];
    bad[n / 2] = -std::numeric_limits<float>::quiet_NaN();
    x_dev.upload(bad);
    EXPECT_TRUE(cuda::has_inf_or_nan(x_dev.get(), n));
    EXPECT_FALSE(cuda::has_inf_or_nan(x_dev.get() + n / 2 + 1, n - n / 2 - 1)) << "unaligned, clean";

    x_dev.upload(x);  // clean data never clears a set flag: one flag collects a whole step
    cuda::find_inf_or_nan(flag_dev.get(), x_dev.get(), n);
    EXPECT_EQ(flag_dev.download()[0], 1);

    Vec unscaled = x;
    unscale(unscaled.data(), n, 3072.0f);
    cuda::unscale(x_dev.get(), n, 3072.0f);
    EXPECT_EQ(x_dev.download(), unscaled) << "unscale";
  }
}

// --- elementwise ----------------------------------------------------------------------------------------

TYPED_TEST(CudaPrecisionTest, AddAndAddBias) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int rows = 9;
  for (const int cols : {40, 13}) {  // packed, and rows that are not whole packs
    const long n = 1L * rows * cols;
    const Vec a = random_normal<T>(n, 101), b = random_normal<T>(n, 102), bias = random_normal<T>(cols, 103);
    Vec sum(n), biased = a;
    for (long i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    for (long i = 0; i < n; ++i) biased[i] += bias[i % cols];
    DeviceArray<T> a_dev(to_storage<T>(a)), b_dev(to_storage<T>(b)), sum_dev(n), bias_dev(to_storage<T>(bias));
    cuda::add(sum_dev.get(), a_dev.get(), b_dev.get(), n);
    expect_close("add", download_f32(sum_dev), sum, rtol<T>(1));
    cuda::add_bias(a_dev.get(), bias_dev.get(), rows, cols);
    expect_close("add_bias", download_f32(a_dev), biased, rtol<T>(1));

    cuda::add(b_dev.get(), sum_dev.get(), b_dev.get(), n);  // out aliases an input
    Vec again = rounded<T>(sum);
    for (long i = 0; i < n; ++i) again[i] += b[i];
    expect_close("add in place", download_f32(b_dev), again, rtol<T>(1));
  }
}

// 1000 rows are split into row chunks (a scratch and a second pass); 10 rows are one chunk that
// adds straight into dbias. Both accumulate onto an existing gradient, the same way every run.
TYPED_TEST(CudaPrecisionTest, BiasBackward) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int cols = 96;
  for (const int rows : {1000, 10}) {
    const Vec dout = random_normal<T>(1L * rows * cols, 111), dbias0 = random_normal<float>(cols, 112);
    Vec dbias = dbias0;
    for (int j = 0; j < cols; ++j) {
      double s = 0;
      for (int r = 0; r < rows; ++r) s += dout[1L * r * cols + j];
      dbias[j] += static_cast<float>(s);
    }
    DeviceArray<T> dout_dev(to_storage<T>(dout));
    DeviceArray<float> dbias_dev(dbias0);
    cuda::bias_backward(dbias_dev.get(), dout_dev.get(), rows, cols);
    const Vec first = dbias_dev.download();
    expect_close("dbias", first, dbias, rtol<float>(rows));
    dbias_dev.upload(dbias0);
    cuda::bias_backward(dbias_dev.get(), dout_dev.get(), rows, cols);
    EXPECT_EQ(dbias_dev.download(), first) << "deterministic";
  }
}

TYPED_TEST(CudaPrecisionTest, GetAndSetColumns) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int rows = 5, stride = 40;
  for (const auto& [col, width] : {std::pair{8, 16}, std::pair{3, 7}}) {  // packed; unaligned and odd
    const Vec src = random_normal<T>(1L * rows * stride, 121), part = random_normal<T>(1L * rows * width, 122);
    Vec columns(1L * rows * width), written = src;
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < width; ++k) {
        columns[1L * r * width + k] = src[1L * r * stride + col + k];
        written[1L * r * stride + col + k] = part[1L * r * width + k];
      }
    DeviceArray<T> src_dev(to_storage<T>(src)), columns_dev(1L * rows * width), part_dev(to_storage<T>(part));
    cuda::get_columns(columns_dev.get(), src_dev.get(), rows, stride, col, width);
    EXPECT_EQ(download_f32(columns_dev), columns) << "get_columns " << col << "+" << width;
    cuda::set_columns(src_dev.get(), part_dev.get(), rows, stride, col, width);
    EXPECT_EQ(download_f32(src_dev), written) << "set_columns " << col << "+" << width;
  }
}

// Same seed, same values; another seed, other values; within [-scale, scale]; the moments of a
// uniform distribution on [-s, s] within 5 standard errors: the mean 0 with standard error
// s / sqrt(3n), the mean square s^2 / 3 with standard error s^2 sqrt(4 / (45n)) (E x^4 = s^4 / 5).
TYPED_TEST(CudaPrecisionTest, FillUniformIsDeterministic) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const long n = 10007;
  const float scale = 0.5f;
  DeviceArray<T> a_dev(n), b_dev(n), c_dev(n);
  cuda::fill_uniform(a_dev.get(), n, 1, scale);
  cuda::fill_uniform(b_dev.get(), n, 1, scale);
  cuda::fill_uniform(c_dev.get(), n, 2, scale);
  const Vec a = download_f32(a_dev), b = download_f32(b_dev), c = download_f32(c_dev);
  EXPECT_EQ(a, b);
  long same = 0, zeros = 0, outside = 0;
  double mean = 0, var = 0;
  for (long i = 0; i < n; ++i) {
    same += a[i] == c[i];
    zeros += a[i] == 0.0f;
    outside += !(std::abs(a[i]) <= scale);
    mean += a[i] / n;
    var += static_cast<double>(a[i]) * a[i] / n;
  }
  EXPECT_LT(same, n / 100);
  EXPECT_LT(zeros, n / 100);
  EXPECT_EQ(outside, 0);
  EXPECT_LT(std::abs(mean), 5 * scale / std::sqrt(3.0 * n));
  EXPECT_NEAR(var, scale * scale / 3, 5 * scale * scale * std::sqrt(4.0 / (45.0 * n)));
}

TEST(CudaElementwise, Scale) {
  if (!parallax::kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const long n : {4096L, 1003L}) {
    const Vec x = random_normal<float>(n, 131);
    Vec scaled = x;
    for (float& v : scaled) v *= 0.3f;
    DeviceArray<float> x_dev(x);
    cuda::scale(x_dev.get(), n, 0.3f);
    EXPECT_EQ(x_dev.download(), scaled);
  }
}

}  // namespace
}  // namespace parallax::kernels
