// StandInCommunicator: a DeviceCommunicator that plays one rank of a group of `size` without any
// peer, for rank emulation — running one rank's share of a plan far larger than the machine (one
// stage of a 13B model under TP 8 x PP 4 on one GPU). Collectives move no data between ranks:
// all-reduce leaves this rank's partial values, gathers copy this rank's block into its slot,
// reduce-scatter keeps this rank's block, receives leave the buffer as it is. The loss an
// emulated last stage reports is its own DP rank's share (not summed over DP). The activations
// therefore stay finite and realistically distributed, the compute runs exactly as in the real
// plan, and the bytes a real group would have sent are counted (nccl-tests convention) so the
// collectives can be timed separately by the simulator's cost model. With size 1 it is the
// single-GPU communicator.
#pragma once

#include "runtime/cuda/device_communicator.h"

namespace parallax {

class StandInCommunicator final : public DeviceCommunicator {
 public:
  StandInCommunicator(int size, int rank) : size_(size), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float* data, int64_t count, ReduceOp op) override;
  void reduce_scatter(float* out, const float* in, int64_t count) override;
  void all_gather(float* out, const float* in, int64_t count) override;
  void broadcast(float* data, int64_t count, int root) override;
  void send(const float* data, int64_t count, int peer, int tag) override;
  void recv(float* data, int64_t count, int peer, int tag) override;
  void send_async(const float* data, int64_t count, int peer, int tag) override;
  void wait_sends() override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key) override;

  void all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t stream) override;
  void reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void group_start() override {}
  void group_end() override {}
  void send_async(const void* data, int64_t count, DType type, int peer, cudaStream_t stream) override;
  void recv_async(void* data, int64_t count, DType type, int peer, cudaStream_t stream) override;
  // A group of the same size and rank: emulation splits a plan's groups by their sizes itself.
  std::unique_ptr<DeviceCommunicator> split_device(int color, int key) override;
  void synchronize(cudaStream_t stream, const char* what) override;

 private:
  int size_, rank_;
};

}  // namespace parallax
