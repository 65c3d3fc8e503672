#include "kernels/cuda/common.h"

#include <stdexcept>

namespace parallax::kernels::cuda {

namespace {
thread_local cudaStream_t g_stream = nullptr;
}

void set_stream(cudaStream_t stream) { g_stream = stream; }
cudaStream_t stream() { return g_stream; }

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
    return false;
  }
  return count > 0;
}

std::string device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "unknown";
  }
  return prop.name;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace parallax::kernels::cuda
