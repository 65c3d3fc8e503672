// The cuBLASLt linear layer and the trainer's reductions against their CPU references: y = x W^T
// + b, and its backward (dinp accumulated or written, dweight and dbias accumulated in fp32), for
// fp32, bf16 and fp16 operands, on shapes that are not multiples of any tile; sum_squares and
// sum_into against double sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"     // DeviceArray, to_storage / rounded, rtol, expect_close
#include "kernels/cuda/matmul.h"  // cuda::matmul_forward / matmul_backward
#include "kernels/cuda/reduce.h"  // cuda::sum_squares / sum_into
#include "kernels/matmul.h"       // CPU matmul_forward / matmul_backward

namespace parallax::kernels {
namespace {

using namespace cuda_test;  // NOLINT(build/namespaces): the helpers are this test's vocabulary

template <class T>
class CudaMatmulTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaMatmulTest, StorageTypes, TypeNames);

// N 67, C 96, OC 40: the reductions are C long (forward, dinp: OC) or N long (dweight, dbias).
TYPED_TEST(CudaMatmulTest, ForwardAndBackwardMatchCpu) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  const int n = 67, c = 96, oc = 40;
  const Vec x = rounded<T>(random_normal<float>(n * c, 1)), w = rounded<T>(random_normal<float>(oc * c, 2, 0.1f)),
            b = rounded<T>(random_normal<float>(oc, 3)), dy = rounded<T>(random_normal<float>(n * oc, 4));
  DeviceArray<T> x_dev(to_storage<T>(x)), w_dev(to_storage<T>(w)), b_dev(to_storage<T>(b)), dy_dev(to_storage<T>(dy));
  DeviceArray<T> y_dev(static_cast<size_t>(n) * oc);
  Vec y(static_cast<size_t>(n) * oc);
  matmul_forward(y.data(), x.data(), w.data(), b.data(), n, c, oc);
  cuda::matmul_forward<T>(y_dev.get(), x_dev.get(), w_dev.get(), b_dev.get(), n, c, oc);
  expect_close("y", download_f32(y_dev), y, rtol<T>(c));
  // A bias that is not 16-byte aligned is added by its own kernel instead of the GEMM's epilogue.
  Vec b_shifted(oc + 1, 0.0f);
  std::copy(b.begin(), b.end(), b_shifted.begin() + 1);
  DeviceArray<T> b_shifted_dev(to_storage<T>(b_shifted));
  cuda::matmul_forward<T>(y_dev.get(), x_dev.get(), w_dev.get(), b_shifted_dev.get() + 1, n, c, oc);
  expect_close("y, unaligned bias", download_f32(y_dev), y, rtol<T>(c));
  // Backward twice into the same buffers: the second call must accumulate (dinp on request).
  const Vec dinp0 = rounded<T>(random_normal<float>(n * c, 5));
  Vec dinp = dinp0, dw(static_cast<size_t>(oc) * c, 0.0f), db(oc, 0.0f);
  DeviceArray<T> dinp_dev(to_storage<T>(dinp0));
  DeviceArray<float> dw_dev(dw), db_dev(db);
  for (int pass = 0; pass < 2; ++pass) {
    matmul_backward(dinp.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, c, oc);
    cuda::matmul_backward<T>(dinp_dev.get(), dw_dev.get(), db_dev.get(), dy_dev.get(), x_dev.get(), w_dev.get(), n, c,
                             oc);
  }
  expect_close("dinp", download_f32(dinp_dev), dinp, rtol<T>(2 * oc));
  expect_close("dweight", dw_dev.download(), dw, rtol<float>(2 * n) + rtol<T>(1));
  expect_close("dbias", db_dev.download(), db, rtol<float>(2 * n) + rtol<T>(1));
  // accumulate_dinp = false writes dinp: the CPU equivalent accumulates into zeros.
  Vec fresh(static_cast<size_t>(n) * c, 0.0f), dw2(dw.size(), 0.0f);
  matmul_backward(fresh.data(), dw2.data(), nullptr, dy.data(), x.data(), w.data(), n, c, oc);
  cuda::matmul_backward<T>(dinp_dev.get(), dw_dev.get(), nullptr, dy_dev.get(), x_dev.get(), w_dev.get(), n, c, oc,
                           false);
  expect_close("dinp written", download_f32(dinp_dev), fresh, rtol<T>(oc));
  // ZB-H1: B's call (dinp only) and W's (dweight and dbias only, no weight) make the same GEMMs.
  DeviceArray<float> dw_split(dw), db_split(db);
  cuda::matmul_backward<T>(dinp_dev.get(), nullptr, nullptr, dy_dev.get(), x_dev.get(), w_dev.get(), n, c, oc, false);
  cuda::matmul_backward<T>(nullptr, dw_split.get(), db_split.get(), dy_dev.get(), x_dev.get(), nullptr, n, c, oc);
  matmul_backward(nullptr, dw.data(), db.data(), dy.data(), x.data(), nullptr, n, c, oc);
  expect_close("dinp alone", download_f32(dinp_dev), fresh, rtol<T>(oc));
  expect_close("dweight alone", dw_split.download(), dw, rtol<float>(3 * n) + rtol<T>(1));
  expect_close("dbias alone", db_split.download(), db, rtol<float>(3 * n) + rtol<T>(1));
}

TEST(CudaReduce, SumSquaresAndSumInto) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const long n = 300001;  // more than one grid-stride pass of 256 x 256 threads
  const Vec x = random_normal<float>(n, 9);
  double squares = 0, sum = 0;
  for (float v : x) squares += double(v) * v, sum += v;
  DeviceArray<float> x_dev(x), acc_dev(Vec{1.5f});
  DeviceArray<double> out_dev(1);
  cuda::sum_squares(out_dev.get(), x_dev.get(), n);
  cuda::sum_into(acc_dev.get(), x_dev.get(), n);
  EXPECT_NEAR(out_dev.download()[0], squares, 1e-9 * squares);
  // fp32 inputs summed in fp64; one fp32 rounding of the accumulated result.
  EXPECT_NEAR(acc_dev.download()[0], 1.5 + sum, 1e-6 * (std::abs(1.5 + sum) + std::sqrt(double(n))));
}

}  // namespace
}  // namespace parallax
