// cuBLASLt GEMMs for the linear layer (kernels/cuda/matmul.h). Row-major arrays are read as the
// column-major transposes cuBLAS expects: x (N x C row-major) is x^T (C x N) column-major, so
// y^T = W x^T is one GEMM with A = W (stored C x OC column-major, transposed), B = x^T.
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "kernels/cuda/elementwise.h"

namespace parallax::kernels::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

// The heuristic's choice per GEMM shape, types and operand alignment, so the step loop asks
// cuBLASLt once per shape. Alignment is part of the key: an algorithm chosen for 256-byte-aligned
// operands may refuse (or fault on) a pointer into the middle of a buffer. The last field says
// whether the bias epilogue is on: not every algorithm has one.
using AlgoKey = std::tuple<bool, bool, int, int, int, int, int, int, int, int, uint32_t, uint32_t, uint32_t, bool>;

// One handle and workspace serve the process: every GEMM runs on the current stream of the one
// device a rank owns (communication streams run no GEMMs), so the workspace is never shared by
// two kernels at once.
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

// One column-major GEMM D = alpha op(A) op(B) + beta D (+ bias[row], m values of D's type, added
// in fp32 by the epilogue before D is rounded) with D (m x n): A and B of type `ab`, D of type
// `cd`, fp32 accumulation and scale (cuBLASLt's CUBLAS_COMPUTE_32F never uses TF32; that takes
// CUBLAS_COMPUTE_32F_FAST_TF32).
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
  const void* bias = nullptr;
};

// The largest power of two, up to 256, that divides the address.
uint32_t alignment_bytes(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return static_cast<uint32_t>(a == 0 ? 256 : std::min<uintptr_t>(256, a & (~a + 1)));
}

// Descriptors freed however run() leaves.
template <class H, cublasStatus_t (*Destroy)(H)>
struct Owned {
  H h = nullptr;
  ~Owned() {
    if (h) Destroy(h);
  }
};

cublasLtMatmulAlgo_t choose_algo(Lt& s, const Gemm& g, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                 cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const uint32_t align[3]) {
  Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  check_blas(cublasLtMatmulPreferenceCreate(&pref.h), "preference");
  check_blas(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                  sizeof(kWorkspaceBytes)),
             "workspace preference");
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t values[4] = {align[0], align[1], align[2], align[2]};  // C and D are one array
  for (int i = 0; i < 4; ++i)
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.h, attrs[i], &values[i], sizeof(values[i])),
               "alignment preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(s.handle, desc, la, lb, ld, ld, pref.h, 1, &heuristic, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0))
    throw std::runtime_error("cuBLASLt: no algorithm for a " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                             std::to_string(g.k) + " GEMM");
  check_blas(hs, "heuristic");
  return heuristic.algo;
}

void run(const Gemm& g, cudaDataType_t ab, cudaDataType_t cd) {
  Lt& s = ready();
  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  check_blas(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_blas(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transpose A");
  check_blas(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transpose B");
  if (g.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_blas(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "bias epilogue");
    check_blas(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)),
               "bias pointer");
  }
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, ld;
  check_blas(cublasLtMatrixLayoutCreate(&la.h, ab, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda), "layout A");
  check_blas(cublasLtMatrixLayoutCreate(&lb.h, ab, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), "layout B");
  check_blas(cublasLtMatrixLayoutCreate(&ld.h, cd, g.m, g.n, g.ldd), "layout D");
  const uint32_t align[3] = {alignment_bytes(g.a), alignment_bytes(g.b), alignment_bytes(g.d)};
  const AlgoKey key{g.trans_a, g.trans_b, g.m,  g.n, g.k, g.lda, g.ldb, g.ldd, static_cast<int>(ab), static_cast<int>(cd),
                    align[0],  align[1],  align[2],  g.bias != nullptr};
  auto it = s.algos.find(key);
  if (it == s.algos.end()) it = s.algos.emplace(key, choose_algo(s, g, desc.h, la.h, lb.h, ld.h, align)).first;
  const float alpha = 1.0f;
  check_blas(cublasLtMatmul(s.handle, desc.h, &alpha, g.a, la.h, g.b, lb.h, &g.beta, g.d, ld.h, g.d, ld.h, &it->second,
                            s.workspace, kWorkspaceBytes, stream()),
             "matmul");
}

}  // namespace

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int n, int c, int oc) {
  // out^T (OC x N) = W (OC x C) x^T (C x N); W row-major OC x C is column-major C x OC, so op(A) = A^T.
  // The bias rides in the GEMM's epilogue (one pass over out fewer) for 16-bit storage where its
  // address is 16-byte aligned, as cuBLASLt's vectorized epilogues read it; elsewhere (fp32, the
  // reference precision) a separate kernel adds it.
  const bool fused = bias && !std::is_same_v<T, float> && alignment_bytes(bias) >= 16;
  run({true, false, oc, n, c, weight, c, inp, c, out, oc, 0.0f, fused ? bias : nullptr}, dtype<T>(), dtype<T>());
  if (bias && !fused) add_bias(out, bias, n, oc);
}

template <class T>
void matmul_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight, int n, int c,
                     int oc, bool accumulate_dinp) {
  // dinp^T (C x N) += W^T (C x OC) dout^T (OC x N): A = W as stored (column-major C x OC).
  if (dinp)
    run({false, false, c, n, oc, weight, c, dout, oc, dinp, c, accumulate_dinp ? 1.0f : 0.0f}, dtype<T>(), dtype<T>());
  // dW^T (C x OC) += x^T (C x N) dout (N x OC): B = dout^T stored column-major OC x N, transposed;
  // written in fp32 so micro-batches accumulate without 16-bit rounding.
  if (dweight) run({false, true, c, oc, n, inp, c, dout, oc, dweight, c, 1.0f}, dtype<T>(), CUDA_R_32F);
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
