#include "runtime/mpi_communicator.h"

#include <mpi.h>

#include <deque>
#include <vector>

namespace parallax {

namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float* data, int64_t count, ReduceOp op) override {
    if (size_ == 1) return;
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm_);
    count_bytes(2.0 * (size_ - 1) / size_ * count * sizeof(float));
  }
  void reduce_scatter(float* out, const float* in, int64_t count) override {
    MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_);
    count_bytes(static_cast<double>(size_ - 1) * count * sizeof(float));
  }
  void all_gather(float* out, const float* in, int64_t count) override {
    MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count), MPI_FLOAT, comm_);
    count_bytes(static_cast<double>(size_ - 1) * count * sizeof(float));
  }
  void broadcast(float* data, int64_t count, int root) override {
    MPI_Bcast(data, static_cast<int>(count), MPI_FLOAT, root, comm_);
    if (rank_ == root) count_bytes(static_cast<double>(count) * sizeof(float));
  }
  void send(const float* data, int64_t count, int peer, int tag) override {
    MPI_Send(data, static_cast<int>(count), MPI_FLOAT, peer, tag, comm_);
    count_bytes(static_cast<double>(count) * sizeof(float));
  }
  void recv(float* data, int64_t count, int peer, int tag) override {
    MPI_Recv(data, static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE);
  }
  void send_async(const float* data, int64_t count, int peer, int tag) override {
    pending_.emplace_back(data, data + count);
    requests_.emplace_back();
    MPI_Isend(pending_.back().data(), static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, &requests_.back());
    count_bytes(static_cast<double>(count) * sizeof(float));
  }
  void wait_sends() override {
    if (!requests_.empty()) MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    pending_.clear();
  }
  void barrier() override { MPI_Barrier(comm_); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    MPI_Comm_split(comm_, color, key, &sub);
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  std::deque<std::vector<float>> pending_;  // copies in flight (a deque keeps them in place)
  std::vector<MPI_Request> requests_;
  int rank_ = 0, size_ = 1;
};

bool g_initialized_here = false;

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    g_initialized_here = true;
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_initialized_here && !finalized) MPI_Finalize();
}

}  // namespace parallax
