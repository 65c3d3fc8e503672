#include "kernels/matmul.h"

#include <Eigen/Core>

namespace parallax::kernels {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMajor>;
using ConstMap = Eigen::Map<const RowMajor>;
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int n, int c, int oc) {
  Map y(out, n, oc);
  y.noalias() = ConstMap(inp, n, c) * ConstMap(weight, oc, c).transpose();
  if (bias) y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, oc);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int n, int c, int oc) {
  ConstMap dy(dout, n, oc);
  if (dinp) Map(dinp, n, c).noalias() += dy * ConstMap(weight, oc, c);
  if (dweight) Map(dweight, oc, c).noalias() += dy.transpose() * ConstMap(inp, n, c);
  if (dbias) Eigen::Map<Eigen::RowVectorXf>(dbias, oc) += dy.colwise().sum();
}

}  // namespace parallax::kernels
