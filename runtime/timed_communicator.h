// TimedCommunicator: forwards every call to another communicator and adds up the seconds spent
// in them, so a trainer can report the TP collectives inside a compute op (the step program's
// "tp ..." events) without instrumenting the model.
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include "runtime/communicator.h"

namespace parallax {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  // Seconds spent in calls since the last take_seconds().
  double take_seconds() { return std::exchange(seconds_, 0.0); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(float* d, int64_t n, ReduceOp op) override { timed([&] { inner_->all_reduce(d, n, op); }); }
  void reduce_scatter(float* o, const float* i, int64_t n) override { timed([&] { inner_->reduce_scatter(o, i, n); }); }
  void all_gather(float* o, const float* i, int64_t n) override { timed([&] { inner_->all_gather(o, i, n); }); }
  void broadcast(float* d, int64_t n, int root) override { timed([&] { inner_->broadcast(d, n, root); }); }
  void send(const float* d, int64_t n, int peer, int tag) override { timed([&] { inner_->send(d, n, peer, tag); }); }
  void recv(float* d, int64_t n, int peer, int tag) override { timed([&] { inner_->recv(d, n, peer, tag); }); }
  void send_async(const float* d, int64_t n, int peer, int tag) override {
    timed([&] { inner_->send_async(d, n, peer, tag); });
  }
  void wait_sends() override { timed([&] { inner_->wait_sends(); }); }
  void barrier() override { timed([&] { inner_->barrier(); }); }
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_->split(color, key); }

 private:
  template <class F>
  void timed(F&& f) {
    const auto begin = std::chrono::steady_clock::now();
    f();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    count_bytes(static_cast<double>(inner_->bytes_sent() - counted_));
    counted_ = inner_->bytes_sent();
  }

  std::unique_ptr<Communicator> inner_;
  double seconds_ = 0;
  int64_t counted_ = 0;
};

}  // namespace parallax
