// NcclCommunicator: the DeviceCommunicator over NCCL, one per NCCL communicator (the world from
// make_nccl_world, groups from split). Float Communicator calls take device pointers, run on the
// communicator's own stream and return when complete; typed *_async calls enqueue on the caller's
// stream and return at once.
//
// Watchdog. Communicators are created non-blocking (ncclConfig_t::blocking = 0), so no NCCL call
// and no wait can hang the host: every call is followed by polling ncclCommGetAsyncError, and every
// wait polls a CUDA event, both bounded by `watchdog_s`. When the limit passes, the communicator is
// aborted and the process prints one line to stderr and ends with exit code 3, like the CPU
// watchdog (runtime/watchdog.h):
//   train: rank R: NCCL <collective> (count N) stuck for S s; communicator aborted
// An NCCL or CUDA error ends the process the same way with a line naming the call. This is the
// one place the runtime exits instead of returning an error: a rank whose peers have failed
// cannot continue, and ending it lets the launcher tear the job down.
//
// Float calls and streams. The float calls run after the work already issued to the default
// stream (and to blocking streams); data produced on another non-blocking stream must be complete
// first. The typed calls follow only their own stream. No blocking call may be made between
// group_start() and group_end().
//
// Point-to-point with floats. NCCL has no tags: `tag` is ignored, and the n-th send from A to B
// matches the n-th receive on B from A. send_async copies the data (on the default stream, so the
// caller's later work there may overwrite it) and defers the send; pending sends are issued, in one NCCL group, with the next blocking receive or send (so
// two stages that send to each other and then receive never deadlock), or before any other
// operation on this communicator, or by wait_sends(). Unlike MPI, a pending send does not
// progress by itself: a rank must not block elsewhere (on another communicator, or in wait_sends()
// before its own receives) on a peer that waits for one of its pending sends.
//
// Bytes sent are counted in the nccl-tests convention, as the MPI communicator does: all-reduce
// 2(n-1)/n·S, reduce-scatter and all-gather (n-1)·count·element bytes, broadcast S at the root,
// send S. Not thread-safe: one host thread issues all calls, in the same order on every rank.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/device_communicator.h"

namespace parallax {

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Takes ownership of `comm` (a non-blocking communicator whose initialization has completed)
  // and creates the communicator's own stream (cudaStreamNonBlocking) on its device. `world_rank` names this
  // process in watchdog messages (groups report the world rank, not their group rank).
  NcclCommunicator(ncclComm_t comm, int world_rank, double watchdog_s = 60);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Communicator: device pointers, complete on return.
  void all_reduce(float* data, int64_t count, ReduceOp op) override;
  void reduce_scatter(float* out, const float* in, int64_t count) override;
  void all_gather(float* out, const float* in, int64_t count) override;
  void broadcast(float* data, int64_t count, int root) override;
  void send(const float* data, int64_t count, int peer, int tag = 0) override;
  void recv(float* data, int64_t count, int peer, int tag = 0) override;
  void send_async(const float* data, int64_t count, int peer, int tag) override;
  void wait_sends() override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  // DeviceCommunicator: stream-ordered, return at once.
  void all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t stream) override;
  void reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void group_start() override;
  void group_end() override;
  void send_async(const void* data, int64_t count, DType type, int peer, cudaStream_t stream) override;
  void recv_async(void* data, int64_t count, DType type, int peer, cudaStream_t stream) override;
  // A rank whose color is negative (NCCL_SPLIT_NOCOLOR) joins no group and gets nullptr.
  std::unique_ptr<DeviceCommunicator> split_device(int color, int key) override;

  // Waits, under the watchdog, until `stream` has reached this point, also watching this
  // communicator's asynchronous errors: how the trainer completes stream-ordered collectives.
  // `what` (and `count` when not negative) name the operation in the timeout message.
  void wait(cudaStream_t stream, const char* what, int64_t count = -1);
  void synchronize(cudaStream_t stream, const char* what) override { wait(stream, what); }

  cudaStream_t stream() const { return stream_; }

 private:
  struct PendingSend {
    DeviceArray<float> copy;
    int peer;
  };

  // After an NCCL call on this communicator: an error ends the process; outside a group, polls
  // until the call has left ncclInProgress (NCCL forbids the next call before that).
  void settle(ncclResult_t result, const std::string& what, int64_t count);
  // Orders the own stream after work already issued to the default stream (and blocking streams).
  void fence_default_stream();
  // Issues the deferred float sends in one group (which joins an enclosing group, if any).
  void issue_pending_sends();
  // Blocking point-to-point: the pending sends and `op` in one group on the own stream, then wait.
  template <class Op>
  void grouped_p2p(const std::string& what, int64_t count, Op op);
  // Waits for the own stream and releases the send copies it has finished with.
  void finish(const std::string& what, int64_t count);

  ncclComm_t comm_ = nullptr;
  int world_rank_ = 0, rank_ = 0, size_ = 1;
  double watchdog_s_ = 60;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
  int group_depth_ = 0;
  std::vector<PendingSend> pending_;            // copied, not yet issued
  std::vector<DeviceArray<float>> in_flight_;   // issued; released when the own stream is next waited on
  DeviceArray<float> barrier_word_;
};

// Sets `device` current, creates the world communicator (non-blocking) and its stream. Every rank
// calls it with the same `id` and `world_size`. Initialization is watched for at least
// kNcclInitTimeoutS: it includes the CUDA context and NCCL's topology probe, which a short
// collective watchdog must not mistake for a hang.
constexpr double kNcclInitTimeoutS = 120;
std::unique_ptr<NcclCommunicator> make_nccl_world(int rank, int world_size, const ncclUniqueId& id, int device,
                                                  double watchdog_s = 60);

}  // namespace parallax
