// DeviceCommunicator: the collectives the GPU runtime issues, on device memory and CUDA streams.
// It extends the runtime's Communicator (whose float calls here take device pointers and return
// when the operation has completed, like the CPU ones) with typed, stream-ordered calls that
// return at once: the trainer launches a collective on a communication stream and fences it with
// events, so DP reduction overlaps the backward. Implementations: NCCL (nccl_communicator.h) and
// a stand-in for rank emulation (stand_in_communicator.h) that moves no data and counts what a
// real group would have sent. Every rank of a group issues the same calls in the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "runtime/communicator.h"

namespace parallax {

enum class DType { kF32, kBF16, kF16 };
inline int64_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

class DeviceCommunicator : public Communicator {
 public:
  // Stream-ordered: enqueued on `stream`, complete when the stream reaches that point.
  virtual void all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t stream) = 0;
  // `in` holds size() * count elements; this rank receives the sum of its block into `out`.
  virtual void reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) = 0;
  // Each rank contributes `count` elements; `out` receives size() * count in rank order.
  virtual void all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) = 0;
  // Point-to-point calls between group_start() and group_end() are issued together (NCCL group
  // semantics): a pair of stages can send to each other without deadlock.
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send_async(const void* data, int64_t count, DType type, int peer, cudaStream_t stream) = 0;
  virtual void recv_async(void* data, int64_t count, DType type, int peer, cudaStream_t stream) = 0;
  // Ranks with the same color form a new communicator, ordered by key.
  virtual std::unique_ptr<DeviceCommunicator> split_device(int color, int key) = 0;
  // Returns when `stream` has reached this point; a stuck collective on this communicator ends
  // the process under its watchdog instead of hanging (`what` names the wait).
  virtual void synchronize(cudaStream_t stream, const char* what) = 0;

  using Communicator::send_async;
};

}  // namespace parallax
