#include "thread_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

namespace parallax::testing_support {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("thread communicator: ") + what + ": " + cudaGetErrorString(e));
}

// What the ranks of a world share: the baton, and the wake-up of ranks waiting in collectives.
struct Hub {
  std::mutex baton;
  std::condition_variable woken;
  bool failed = false;  // a rank threw: the others stop waiting for it
  std::string first_error;
};

// One rank's arguments to the collective under way.
struct Call {
  const void* in = nullptr;
  void* out = nullptr;
  int color = 0, key = 0;  // split
};

struct Group {
  explicit Group(int n) : size(n), calls(n), split_to(n), split_rank(n, -1) {}
  int size;
  std::vector<Call> calls;  // by rank in the group
  int arrived = 0;
  uint64_t completed = 0;  // collectives completed: a waiter's turn has come when it moves
  std::vector<std::shared_ptr<Group>> split_to;  // a split's result, by rank
  std::vector<int> split_rank;
};

std::vector<char> to_host(const void* device, int64_t bytes) {
  std::vector<char> host(static_cast<size_t>(bytes));
  check(cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost), "copy to host");
  return host;
}

void to_device(void* device, const void* host, int64_t bytes) {
  check(cudaMemcpy(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "copy to device");
}

class ThreadCommunicator final : public DeviceCommunicator {
 public:
  ThreadCommunicator(std::shared_ptr<Hub> hub, std::shared_ptr<Group> group, int rank,
                     std::unique_lock<std::mutex>* baton)
      : hub_(std::move(hub)), group_(std::move(group)), rank_(rank), baton_(baton) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  void all_reduce(float* data, int64_t count, ReduceOp op) override {
    all_reduce_async(data, count, DType::kF32, op, nullptr);
  }
  void reduce_scatter(float* out, const float* in, int64_t count) override {
    reduce_scatter_async(out, in, count, DType::kF32, nullptr);
  }
  void all_gather(float* out, const float* in, int64_t count) override {
    all_gather_async(out, in, count, DType::kF32, nullptr);
  }
  void broadcast(float* data, int64_t count, int root) override;
  void send(const float*, int64_t, int, int) override { unsupported(); }
  void recv(float*, int64_t, int, int) override { unsupported(); }
  void send_async(const float*, int64_t, int, int) override { unsupported(); }
  void wait_sends() override {}
  void barrier() override {
    rendezvous({}, [](std::vector<Call>&) {});
  }
  std::unique_ptr<Communicator> split(int color, int key) override { return split_device(color, key); }

  void all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t stream) override;
  void reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) override;
  void group_start() override {}
  void group_end() override {}
  void send_async(const void*, int64_t, DType, int, cudaStream_t) override { unsupported(); }
  void recv_async(void*, int64_t, DType, int, cudaStream_t) override { unsupported(); }
  std::unique_ptr<DeviceCommunicator> split_device(int color, int key) override;
  void synchronize(cudaStream_t stream, const char* what) override { check(cudaStreamSynchronize(stream), what); }

 private:
  [[noreturn]] static void unsupported() { throw std::logic_error("thread communicator: no point-to-point calls"); }
  // Posts this rank's call; the last rank of the group to post runs `perform` over every call.
  // Returns once the collective is complete, holding the baton.
  void rendezvous(const Call& call, const std::function<void(std::vector<Call>&)>& perform);

  std::shared_ptr<Hub> hub_;
  std::shared_ptr<Group> group_;
  int rank_;
  std::unique_lock<std::mutex>* baton_;  // this rank's thread's hold on hub_->baton
};

void ThreadCommunicator::rendezvous(const Call& call, const std::function<void(std::vector<Call>&)>& perform) {
  // The inputs are complete, and the rank that runs next finds the device idle.
  check(cudaDeviceSynchronize(), "synchronize before a collective");
  Group& g = *group_;
  g.calls[static_cast<size_t>(rank_)] = call;
  if (++g.arrived == g.size) {
    g.arrived = 0;
    perform(g.calls);
    check(cudaDeviceSynchronize(), "synchronize after a collective");  // host-to-device copies may return early
    ++g.completed;
    hub_->woken.notify_all();
    return;
  }
  const uint64_t turn = g.completed;
  hub_->woken.wait(*baton_, [&] { return g.completed != turn || hub_->failed; });
  if (g.completed == turn) throw std::runtime_error("thread communicator: another rank failed");
}

// Sums (or maxima) over the ranks in rank order; only fp32 moves between ranks (gradients, norms
// and losses), and a group of one leaves any type as it is.
void ThreadCommunicator::all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t) {
  if (type != DType::kF32 && size() > 1) throw std::logic_error("thread communicator: all-reduce of 16-bit data");
  count_bytes(2.0 * (size() - 1) / size() * static_cast<double>(count * dtype_bytes(type)));
  rendezvous({data, data}, [&](std::vector<Call>& calls) {
    if (size() == 1) return;
    std::vector<float> total(static_cast<size_t>(count)), part(total.size());
    for (size_t r = 0; r < calls.size(); ++r) {
      check(cudaMemcpy(part.data(), calls[r].in, part.size() * sizeof(float), cudaMemcpyDeviceToHost), "all-reduce");
      for (size_t i = 0; i < part.size(); ++i)
        total[i] = r == 0 ? part[i] : op == ReduceOp::kSum ? total[i] + part[i] : std::max(total[i], part[i]);
    }
    for (const Call& c : calls) to_device(c.out, total.data(), count * static_cast<int64_t>(sizeof(float)));
  });
}

// Every input is read before any output is written: NCCL's in-place form passes out = in + rank.
void ThreadCommunicator::reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t) {
  if (type != DType::kF32) throw std::logic_error("thread communicator: reduce-scatter of 16-bit data");
  count_bytes(static_cast<double>(size() - 1) * static_cast<double>(count * dtype_bytes(type)));
  rendezvous({in, out}, [&](std::vector<Call>& calls) {
    const size_t n = static_cast<size_t>(count) * calls.size();
    std::vector<float> total(n, 0.0f), part(n);
    for (const Call& c : calls) {
      check(cudaMemcpy(part.data(), c.in, n * sizeof(float), cudaMemcpyDeviceToHost), "reduce-scatter");
      for (size_t i = 0; i < n; ++i) total[i] += part[i];
    }
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    for (size_t r = 0; r < calls.size(); ++r) to_device(calls[r].out, total.data() + r * static_cast<size_t>(count), bytes);
  });
}

void ThreadCommunicator::all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t) {
  const int64_t bytes = count * dtype_bytes(type);
  count_bytes(static_cast<double>(size() - 1) * static_cast<double>(bytes));
  rendezvous({in, out}, [&](std::vector<Call>& calls) {
    std::vector<char> all;
    for (const Call& c : calls) {
      const std::vector<char> block = to_host(c.in, bytes);
      all.insert(all.end(), block.begin(), block.end());
    }
    for (const Call& c : calls) to_device(c.out, all.data(), static_cast<int64_t>(all.size()));
  });
}

void ThreadCommunicator::broadcast(float* data, int64_t count, int root) {
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  if (rank_ == root) count_bytes(static_cast<double>(bytes));
  rendezvous({data, data}, [&](std::vector<Call>& calls) {
    const std::vector<char> value = to_host(calls[static_cast<size_t>(root)].in, bytes);
    for (const Call& c : calls) to_device(c.out, value.data(), bytes);
  });
}

// Ranks of one color form a group, ordered by (key, rank); a negative color joins none.
std::unique_ptr<DeviceCommunicator> ThreadCommunicator::split_device(int color, int key) {
  Call call;
  call.color = color, call.key = key;
  rendezvous(call, [&](std::vector<Call>& calls) {
    std::vector<std::tuple<int, int, int>> order;  // (color, key, rank)
    for (size_t r = 0; r < calls.size(); ++r)
      if (calls[r].color >= 0) order.emplace_back(calls[r].color, calls[r].key, static_cast<int>(r));
    std::sort(order.begin(), order.end());
    for (size_t i = 0; i < order.size();) {
      size_t j = i;
      while (j < order.size() && std::get<0>(order[j]) == std::get<0>(order[i])) ++j;
      auto group = std::make_shared<Group>(static_cast<int>(j - i));
      for (size_t k = i; k < j; ++k) {
        group_->split_to[static_cast<size_t>(std::get<2>(order[k]))] = group;
        group_->split_rank[static_cast<size_t>(std::get<2>(order[k]))] = static_cast<int>(k - i);
      }
      i = j;
    }
  });
  // Read before this rank's next collective on the group, which no other rank can complete first.
  std::shared_ptr<Group> mine = std::move(group_->split_to[static_cast<size_t>(rank_)]);
  if (!mine) return nullptr;
  const int rank = group_->split_rank[static_cast<size_t>(rank_)];
  return std::make_unique<ThreadCommunicator>(hub_, std::move(mine), rank, baton_);
}

}  // namespace

std::string run_thread_ranks(int ranks, const std::function<void(DeviceCommunicator& world)>& body) {
  auto hub = std::make_shared<Hub>();
  auto world = std::make_shared<Group>(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      std::unique_lock<std::mutex> baton(hub->baton);
      try {
        ThreadCommunicator comm(hub, world, r, &baton);
        body(comm);
        check(cudaDeviceSynchronize(), "synchronize at the end of a rank");
      } catch (const std::exception& e) {  // still holding the baton
        if (!hub->failed) hub->first_error = "rank " + std::to_string(r) + ": " + e.what();
        hub->failed = true;
        hub->woken.notify_all();
      }
    });
  for (std::thread& t : threads) t.join();
  return hub->first_error;
}

}  // namespace parallax::testing_support
