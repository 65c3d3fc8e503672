#include "runtime/cuda/stand_in_communicator.h"

#include "kernels/cuda/common.h"

namespace parallax {

namespace {
void copy_async(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
  if (dst != src && bytes > 0)
    kernels::cuda::check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
                         "stand-in collective copy");
}
}  // namespace

void StandInCommunicator::all_reduce_async(void*, int64_t count, DType type, ReduceOp, cudaStream_t) {
  count_bytes(2.0 * (size_ - 1) / size_ * static_cast<double>(count * dtype_bytes(type)));
}

void StandInCommunicator::reduce_scatter_async(void* out, const void* in, int64_t count, DType type,
                                               cudaStream_t stream) {
  const int64_t bytes = count * dtype_bytes(type);
  copy_async(out, static_cast<const char*>(in) + rank_ * bytes, bytes, stream);
  count_bytes(static_cast<double>(size_ - 1) * static_cast<double>(bytes));
}

// Every slot gets this rank's block: the peers' blocks would be as real, and a slot left as the
// allocator last had it could hold NaNs. In place (ZeRO's weight gather), the other slots already
// hold real values (the previous step's) and stay.
void StandInCommunicator::all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) {
  const int64_t bytes = count * dtype_bytes(type);
  const bool in_place = static_cast<char*>(out) + rank_ * bytes == in;
  for (int r = 0; r < size_ && !in_place; ++r) copy_async(static_cast<char*>(out) + r * bytes, in, bytes, stream);
  count_bytes(static_cast<double>(size_ - 1) * static_cast<double>(bytes));
}

void StandInCommunicator::send_async(const void*, int64_t count, DType type, int, cudaStream_t) {
  count_bytes(static_cast<double>(count * dtype_bytes(type)));
}

void StandInCommunicator::recv_async(void*, int64_t, DType, int, cudaStream_t) {}

void StandInCommunicator::synchronize(cudaStream_t stream, const char* what) {
  kernels::cuda::check(cudaStreamSynchronize(stream), what);
}

std::unique_ptr<DeviceCommunicator> StandInCommunicator::split_device(int, int) {
  return std::make_unique<StandInCommunicator>(size_, rank_);
}

// The blocking float calls: the same, on the legacy stream, then wait.
void StandInCommunicator::all_reduce(float* data, int64_t count, ReduceOp op) {
  all_reduce_async(data, count, DType::kF32, op, nullptr);
}
void StandInCommunicator::reduce_scatter(float* out, const float* in, int64_t count) {
  reduce_scatter_async(out, in, count, DType::kF32, nullptr);
  kernels::cuda::check(cudaStreamSynchronize(nullptr), "stand-in reduce-scatter");
}
void StandInCommunicator::all_gather(float* out, const float* in, int64_t count) {
  all_gather_async(out, in, count, DType::kF32, nullptr);
  kernels::cuda::check(cudaStreamSynchronize(nullptr), "stand-in all-gather");
}
void StandInCommunicator::broadcast(float* data, int64_t count, int root) {
  (void)data;
  if (rank_ == root) count_bytes(static_cast<double>(count) * sizeof(float));
}
void StandInCommunicator::send(const float* data, int64_t count, int peer, int) {
  send_async(data, count, DType::kF32, peer, nullptr);
}
void StandInCommunicator::recv(float*, int64_t, int, int) {}
void StandInCommunicator::send_async(const float* data, int64_t count, int peer, int) {
  send_async(data, count, DType::kF32, peer, nullptr);
}
std::unique_ptr<Communicator> StandInCommunicator::split(int, int) {
  return std::make_unique<StandInCommunicator>(size_, rank_);
}

}  // namespace parallax
