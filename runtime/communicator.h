// Communicator: the collectives and point-to-point calls the runtime needs, behind one interface —
// Open MPI on CPUs (mpi_communicator.h), NCCL on GPUs later, and a single-rank communicator for
// tests without MPI. Every rank of a group must issue the same collectives in the same order.
// Each communicator counts the bytes it sends in the nccl-tests convention (collective.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace parallax {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(float* data, int64_t count, ReduceOp op) = 0;
  // `in` holds size() * count values; this rank receives the sum of its block into `out`.
  virtual void reduce_scatter(float* out, const float* in, int64_t count) = 0;
  // Each rank contributes `count` values; `out` receives size() * count in rank order.
  virtual void all_gather(float* out, const float* in, int64_t count) = 0;
  virtual void broadcast(float* data, int64_t count, int root) = 0;
  virtual void send(const float* data, int64_t count, int peer, int tag = 0) = 0;
  virtual void recv(float* data, int64_t count, int peer, int tag = 0) = 0;
  // Sends a copy of `data` without waiting for the receiver (pipeline transfers, so that two
  // stages sending to each other never deadlock); wait_sends() completes all of them.
  virtual void send_async(const float* data, int64_t count, int peer, int tag) = 0;
  virtual void wait_sends() = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new communicator, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  void count_bytes(double bytes) { bytes_sent_ += static_cast<int64_t>(bytes); }

 private:
  int64_t bytes_sent_ = 0;
};

// A group of one: collectives are copies, send/recv are errors.
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace parallax
