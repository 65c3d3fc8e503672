// cuBLASLt GEMMs for the linear layer (kernels/cuda/matmul.h). Row-major arrays are read as the
// column-major transposes cuBLAS expects: x (N x C row-major) is x^T (C x N) column-major, so
// y^T = W x^T is one GEMM with A = W (stored C x OC column-major, transposed), B = x^T.
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/cuda/elementwise.h"

namespace parallax::kernels::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

// The heuristic's choice per GEMM shape and types, so the step loop asks cuBLASLt once per shape.
using AlgoKey = std::tuple<bool, bool, int, int, int, int, int, int, int, int>;

struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};
Lt& lt() {
  static Lt state;
  return state;
}

void check_blas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLASLt ") + what + ": status " + std::to_string(st));
}

Lt& ready() {
  Lt& s = lt();
  if (!s.handle) {
    check_blas(cublasLtCreate(&s.handle), "create");
    check(cudaMalloc(&s.workspace, kWorkspaceBytes), "cudaMalloc(cuBLASLt workspace)");
  }
  return s;
}

template <class T>
cudaDataType_t dtype();
template <>
cudaDataType_t dtype<float>() { return CUDA_R_32F; }
template <>
cudaDataType_t dtype<bf16>() { return CUDA_R_16BF; }
template <>
cudaDataType_t dtype<fp16>() { return CUDA_R_16F; }

// One column-major GEMM D = alpha op(A) op(B) + beta D with D (m x n): A and B of type `ab`,
// D of type `cd`, fp32 accumulation and scale (cuBLASLt's CUBLAS_COMPUTE_32F never uses TF32;
// that takes CUBLAS_COMPUTE_32F_FAST_TF32).
struct Gemm {
  bool trans_a, trans_b;
  int m, n, k;
  const void* a;
  int lda;
  const void* b;
  int ldb;
  void* d;
  int ldd;
  float beta;
};

void run(const Gemm& g, cudaDataType_t ab, cudaDataType_t cd) {
  Lt& s = ready();
  cublasLtMatmulDesc_t desc = nullptr;
  check_blas(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check_blas(cublasLtMatrixLayoutCreate(&la, ab, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda), "layout A");
  check_blas(cublasLtMatrixLayoutCreate(&lb, ab, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), "layout B");
  check_blas(cublasLtMatrixLayoutCreate(&ld, cd, g.m, g.n, g.ldd), "layout D");
  const AlgoKey key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, static_cast<int>(ab), static_cast<int>(cd)};
  auto it = s.algos.find(key);
  if (it == s.algos.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "preference");
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                         sizeof(kWorkspaceBytes));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(s.handle, desc, la, lb, ld, ld, pref, 1, &heuristic, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    check_blas(hs, "heuristic");
    if (found == 0) throw std::runtime_error("cuBLASLt: no algorithm for a " + std::to_string(g.m) + "x" +
                                             std::to_string(g.n) + "x" + std::to_string(g.k) + " GEMM");
    it = s.algos.emplace(key, heuristic.algo).first;
  }
  const float alpha = 1.0f;
  const cublasStatus_t st = cublasLtMatmul(s.handle, desc, &alpha, g.a, la, g.b, lb, &g.beta, g.d, ld, g.d, ld,
                                           &it->second, s.workspace, kWorkspaceBytes, stream());
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  check_blas(st, "matmul");
}

}  // namespace

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int n, int c, int oc) {
  // out^T (OC x N) = W (OC x C) x^T (C x N); W row-major OC x C is column-major C x OC, so op(A) = A^T.
  run({true, false, oc, n, c, weight, c, inp, c, out, oc, 0.0f}, dtype<T>(), dtype<T>());
  if (bias) add_bias(out, bias, n, oc);
}

template <class T>
void matmul_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight, int n, int c,
                     int oc, bool accumulate_dinp) {
  // dinp^T (C x N) += W^T (C x OC) dout^T (OC x N): A = W as stored (column-major C x OC).
  if (dinp)
    run({false, false, c, n, oc, weight, c, dout, oc, dinp, c, accumulate_dinp ? 1.0f : 0.0f}, dtype<T>(), dtype<T>());
  // dW^T (C x OC) += x^T (C x N) dout (N x OC): B = dout^T stored column-major OC x N, transposed;
  // written in fp32 so micro-batches accumulate without 16-bit rounding.
  run({false, true, c, oc, n, inp, c, dout, oc, dweight, c, 1.0f}, dtype<T>(), CUDA_R_32F);
  if (dbias) bias_backward(dbias, dout, n, oc);
}

size_t matmul_workspace_bytes() { return kWorkspaceBytes; }

#define PARALLAX_INSTANTIATE(T)                                                                              \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                         \
  template void matmul_backward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, int, bool);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
