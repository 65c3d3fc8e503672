#include <algorithm>
#include <stdexcept>

#include "runtime/communicator.h"

namespace parallax {

namespace {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(float*, int64_t, ReduceOp) override {}
  void reduce_scatter(float* out, const float* in, int64_t count) override { std::copy(in, in + count, out); }
  void all_gather(float* out, const float* in, int64_t count) override { std::copy(in, in + count, out); }
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override { throw std::logic_error("send on a single-rank communicator"); }
  void recv(float*, int64_t, int, int) override { throw std::logic_error("recv on a single-rank communicator"); }
  void send_async(const float*, int64_t, int, int) override {
    throw std::logic_error("send on a single-rank communicator");
  }
  void wait_sends() override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace parallax
