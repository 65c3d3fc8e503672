#include "runtime/watchdog.h"

#include "runtime/communicator.h"

#include <cstdio>
#include <cstdlib>

namespace parallax {

Watchdog::Watchdog(int rank, double limit_s) : rank_(rank), limit_s_(limit_s), thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  stop_ = true;
  thread_.join();
}

void Watchdog::enter(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  what_ = what;
  since_ = std::chrono::steady_clock::now();
  busy_ = true;
}

void Watchdog::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
}

void Watchdog::watch() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::lock_guard<std::mutex> lock(mu_);
    if (!busy_) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (waited < limit_s_) continue;
    std::fprintf(stderr, "train: error: rank %d stuck for %.0f s in %s (a peer rank has probably failed)\n", rank_, waited,
                 what_.c_str());
    std::fflush(stderr);
    std::_Exit(3);  // no unwinding: other threads are blocked inside MPI
  }
}

namespace {

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(std::unique_ptr<Communicator> inner, Watchdog* dog) : inner_(std::move(inner)), dog_(dog) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(float* d, int64_t n, ReduceOp op) override { run("all-reduce", [&] { inner_->all_reduce(d, n, op); }); }
  void reduce_scatter(float* o, const float* i, int64_t n) override {
    run("reduce-scatter", [&] { inner_->reduce_scatter(o, i, n); });
  }
  void all_gather(float* o, const float* i, int64_t n) override { run("all-gather", [&] { inner_->all_gather(o, i, n); }); }
  void broadcast(float* d, int64_t n, int root) override { run("broadcast", [&] { inner_->broadcast(d, n, root); }); }
  void send(const float* d, int64_t n, int peer, int tag) override { run("send", [&] { inner_->send(d, n, peer, tag); }); }
  void recv(float* d, int64_t n, int peer, int tag) override {
    run("receive from group rank " + std::to_string(peer), [&] { inner_->recv(d, n, peer, tag); });
  }
  void send_async(const float* d, int64_t n, int peer, int tag) override { inner_->send_async(d, n, peer, tag); }
  void wait_sends() override { run("wait for sends", [&] { inner_->wait_sends(); }); }
  void barrier() override { run("barrier", [&] { inner_->barrier(); }); }
  std::unique_ptr<Communicator> split(int color, int key) override { return watched(inner_->split(color, key), dog_); }

 private:
  template <class F>
  void run(const std::string& what, F&& f) {
    dog_->enter(what + " (group of " + std::to_string(size()) + " ranks)");
    f();
    dog_->leave();
    count_bytes(static_cast<double>(inner_->bytes_sent() - counted_));
    counted_ = inner_->bytes_sent();
  }
  std::unique_ptr<Communicator> inner_;
  Watchdog* dog_;
  int64_t counted_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> watched(std::unique_ptr<Communicator> inner, Watchdog* dog) {
  return std::make_unique<WatchedCommunicator>(std::move(inner), dog);
}

}  // namespace parallax
