// The NCCL communicator on a world of one rank (the collectives' results and byte counts, split,
// point-to-point to itself, the watchdog), and the NCCL id bootstrap. The bootstrap's file
// rendezvous and its MPI broadcast need no GPU and run everywhere; the rest skips without a device.
#include "runtime/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/nccl_bootstrap.h"

namespace parallax {
namespace {

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

std::unique_ptr<NcclCommunicator> one_rank_world(double watchdog_s = 60) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return make_nccl_world(0, 1, id, 0, watchdog_s);
}

template <class T>
DeviceArray<T> to_device(const std::vector<T>& host) {
  DeviceArray<T> d(static_cast<int64_t>(host.size()));
  EXPECT_EQ(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  // A copy from pageable memory may return before the data lands; the typed calls run on
  // non-blocking streams that the legacy stream does not order.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d;
}

template <class T>
std::vector<T> to_host(const DeviceArray<T>& d) {
  std::vector<T> host(static_cast<size_t>(d.size()));
  EXPECT_EQ(cudaMemcpy(host.data(), d.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// With one rank every collective is an identity (or a copy), and the nccl-tests byte counts are
// 2(n-1)/n·S = 0, (n-1)·S = 0 and, for a broadcast, S at the root (as the MPI communicator counts).
TEST(NcclCommunicator, OneRankF32CollectivesAndByteCounts) {
  REQUIRE_DEVICE();
  std::unique_ptr<NcclCommunicator> world = one_rank_world();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  const std::vector<float> values = {1.0f, -2.0f, 3.5f};
  DeviceArray<float> data = to_device(values), out(3);
  world->all_reduce(data.data(), 3, ReduceOp::kSum);
  EXPECT_EQ(to_host(data), values);
  world->all_reduce(data.data(), 3, ReduceOp::kMax);
  EXPECT_EQ(to_host(data), values);
  world->all_gather(out.data(), data.data(), 3);
  EXPECT_EQ(to_host(out), values);
  world->reduce_scatter(out.data(), data.data(), 3);
  EXPECT_EQ(to_host(out), values);
  EXPECT_EQ(world->bytes_sent(), 0);
  world->broadcast(data.data(), 3, 0);
  EXPECT_EQ(to_host(data), values);
  EXPECT_EQ(world->bytes_sent(), 12);  // 3 floats from the root
  world->barrier();
  EXPECT_EQ(world->bytes_sent(), 12);
}

// bf16 bit patterns of 1, 2 and -3 (the high halves of their f32 patterns).
TEST(NcclCommunicator, OneRankBf16AsyncCollectives) {
  REQUIRE_DEVICE();
  std::unique_ptr<NcclCommunicator> world = one_rank_world();
  const std::vector<uint16_t> values = {0x3F80, 0x4000, 0xC040};
  DeviceArray<uint16_t> data = to_device(values), out(3);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  world->all_reduce_async(data.data(), 3, DType::kBF16, ReduceOp::kSum, stream);
  world->wait(stream, "all-reduce", 3);
  EXPECT_EQ(to_host(data), values);
  world->all_gather_async(out.data(), data.data(), 3, DType::kBF16, stream);
  world->wait(stream, "all-gather");
  EXPECT_EQ(to_host(out), values);
  ASSERT_EQ(cudaMemsetAsync(out.data(), 0, 3 * sizeof(uint16_t), stream), cudaSuccess);
  world->reduce_scatter_async(out.data(), data.data(), 3, DType::kBF16, stream);
  world->wait(stream, "reduce-scatter");
  EXPECT_EQ(to_host(out), values);
  EXPECT_EQ(world->bytes_sent(), 0);
  cudaStreamDestroy(stream);
}

// A send to itself is matched by the receive it is grouped with; the copy lets the caller reuse
// its buffer as soon as send_async returns.
TEST(NcclCommunicator, DeferredSendToItselfMatchesTheNextReceive) {
  REQUIRE_DEVICE();
  std::unique_ptr<NcclCommunicator> world = one_rank_world();
  DeviceArray<float> data = to_device(std::vector<float>{4.0f, 5.0f}), got(2);
  world->send_async(data.data(), 2, 0, /*tag, ignored=*/7);
  ASSERT_EQ(cudaMemset(data.data(), 0, 2 * sizeof(float)), cudaSuccess);
  world->recv(got.data(), 2, 0);
  world->wait_sends();
  EXPECT_EQ(to_host(got), (std::vector<float>{4.0f, 5.0f}));
  EXPECT_EQ(world->bytes_sent(), 8);
}

TEST(NcclCommunicator, TypedSendAndReceiveInAGroup) {
  REQUIRE_DEVICE();
  std::unique_ptr<NcclCommunicator> world = one_rank_world();
  DeviceArray<uint16_t> data = to_device(std::vector<uint16_t>{0x3F80, 0x4000}), got(2);
  world->group_start();
  world->send_async(data.data(), 2, DType::kBF16, 0, world->stream());
  world->recv_async(got.data(), 2, DType::kBF16, 0, world->stream());
  world->group_end();
  world->wait(world->stream(), "send/receive group");
  EXPECT_EQ(to_host(got), (std::vector<uint16_t>{0x3F80, 0x4000}));
  EXPECT_EQ(world->bytes_sent(), 4);
}

TEST(NcclCommunicator, SplitFormsGroups) {
  REQUIRE_DEVICE();
  std::unique_ptr<NcclCommunicator> world = one_rank_world();
  std::unique_ptr<DeviceCommunicator> group = world->split_device(0, 0);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
  DeviceArray<float> data = to_device(std::vector<float>{2.0f});
  group->all_reduce(data.data(), 1, ReduceOp::kSum);
  EXPECT_EQ(to_host(data), std::vector<float>{2.0f});
  std::unique_ptr<Communicator> as_communicator = world->split(3, 0);
  ASSERT_NE(as_communicator, nullptr);
  EXPECT_EQ(as_communicator->size(), 1);
  EXPECT_EQ(world->split_device(-1, 0), nullptr);  // NCCL_SPLIT_NOCOLOR: no group
}

void sleep_10_s(void*) { std::this_thread::sleep_for(std::chrono::seconds(10)); }

// A wait longer than the limit aborts the communicator and ends the process with exit code 3 and
// one line naming the rank and the operation. The host function holds the stream for 10 s; the
// limit of 3 s applies to the wait alone (initialization has kNcclInitTimeoutS).
TEST(NcclCommunicatorDeathTest, WatchdogEndsAStuckWait) {
  REQUIRE_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts afresh: CUDA does not survive fork
  EXPECT_EXIT(
      {
        std::unique_ptr<NcclCommunicator> world = one_rank_world(3.0);
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        cudaLaunchHostFunc(stream, sleep_10_s, nullptr);
        world->wait(stream, "all-reduce", 7);
      },
      ::testing::ExitedWithCode(3), "train: rank 0: NCCL all-reduce \\(count 7\\) stuck for 3 s; communicator aborted");
}

// Without a device the world cannot be made: one line naming the failed call, exit code 3.
TEST(NcclCommunicatorDeathTest, NoDeviceEndsTheProcessWithOneLine) {
  if (has_device()) GTEST_SKIP() << "a CUDA device is present";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ncclUniqueId id{};
  EXPECT_EXIT(make_nccl_world(0, 1, id, 0, 1.0), ::testing::ExitedWithCode(3), "train: rank 0: cudaSetDevice failed: ");
}

// ---- Bootstrap (no GPU needed) ---------------------------------------------------------------

// Sets environment variables for one test and restores them after it.
class ScopedEnv {
 public:
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_)
      old ? setenv(name.c_str(), old->c_str(), 1) : unsetenv(name.c_str());
  }
  void set(const std::string& name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    value ? setenv(name.c_str(), value, 1) : unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A fresh directory per test (ctest runs tests in parallel) and a launcher environment without
// tokens, which the tests then set as they need.
class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/parallax-rendezvous-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    for (const char* name : {"SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "MASTER_PORT"})
      env_.set(name, nullptr);
    env_.set("PARALLAX_NCCL_ID_DIR", dir_.c_str());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string id_bytes(char seed) {
    std::string bytes(sizeof(ncclUniqueId), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(seed + 7 * i);  // zeros and high bytes too
    return bytes;
  }
  static std::string bytes_of(const ncclUniqueId& id) { return std::string(id.internal, sizeof id.internal); }

  std::string dir_;
  ScopedEnv env_;
};

TEST_F(RendezvousTest, WhatIsWrittenIsRead) {
  const std::string path = dir_ + "/sub/nccl-id";  // the writer creates the directory
  ASSERT_TRUE(write_rendezvous_file(path, id_bytes(0)).ok());
  Result<std::string> read = read_rendezvous_file(path, 128, 1.0);
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(*read, id_bytes(0));
  EXPECT_EQ(std::filesystem::directory_iterator(dir_ + "/sub")->path(), path);  // no temporary left
}

TEST_F(RendezvousTest, ReaderWaitsForTheWriter) {
  const std::string path = dir_ + "/nccl-id";
  std::optional<Result<std::string>> read;
  std::thread reader([&] { read = read_rendezvous_file(path, 128, 10.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(write_rendezvous_file(path, id_bytes(5)).ok());
  reader.join();
  ASSERT_TRUE(read->ok()) << read->error();
  EXPECT_EQ(**read, id_bytes(5));
}

TEST_F(RendezvousTest, TimeoutNamesTheFile) {
  Result<std::string> read = read_rendezvous_file(dir_ + "/nccl-id", 128, 0.1);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().find(dir_ + "/nccl-id"), std::string::npos) << read.error();
}

TEST_F(RendezvousTest, RejectsAFileOfAnotherFormatOrSize) {
  const std::string path = dir_ + "/nccl-id";
  std::ofstream(path) << "hello\n";
  Result<std::string> foreign = read_rendezvous_file(path, 128, 1.0);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().find("is not a rendezvous file"), std::string::npos) << foreign.error();
  ASSERT_TRUE(write_rendezvous_file(path, std::string(64, 'x')).ok());
  EXPECT_FALSE(read_rendezvous_file(path, 128, 1.0).ok());
}

// The directory and the launch token come from the launcher's environment.
TEST_F(RendezvousTest, PathFromTheEnvironment) {
  EXPECT_EQ(nccl_id_path(), dir_ + "/nccl-id");
  env_.set("SLURM_JOB_ID", "42");
  env_.set("SLURM_STEP_ID", "0");
  EXPECT_EQ(nccl_id_path(), dir_ + "/nccl-id.42.0");
  env_.set("SLURM_JOB_ID", nullptr);
  env_.set("PMIX_NAMESPACE", "prterun-host-123@1");
  env_.set("TORCHELASTIC_RESTART_COUNT", "2");
  EXPECT_EQ(nccl_id_path(), dir_ + "/nccl-id.prterun-host-123_1-restart2");
  env_.set("PMIX_NAMESPACE", nullptr);
  env_.set("TORCHELASTIC_RESTART_COUNT", nullptr);
  env_.set("PARALLAX_NCCL_ID_DIR", nullptr);
  env_.set("USER", "alice");
  env_.set("MASTER_PORT", "29500");
  EXPECT_EQ(nccl_id_path(), "/tmp/parallax-nccl-alice-29500/nccl-id");
  env_.set("TORCHELASTIC_RUN_ID", "run/7");
  EXPECT_EQ(nccl_id_path(), "/tmp/parallax-nccl-alice-run_7/nccl-id");
  env_.set("TORCHELASTIC_RUN_ID", nullptr);
  env_.set("MASTER_PORT", nullptr);
  EXPECT_EQ(nccl_id_path(), "/tmp/parallax-nccl-alice-default/nccl-id");
}

const LaunchInfo kRank0{"torchrun", 0, 2, 0}, kRank1{"torchrun", 1, 2, 1};

// ncclGetUniqueId needs no GPU where NCCL can open its bootstrap socket; elsewhere these skip.
#define REQUIRE_NCCL_ID(result)                                                                  \
  if (!(result).ok() && (result).error().find("ncclGetUniqueId") != std::string::npos) \
  GTEST_SKIP() << (result).error()

TEST_F(RendezvousTest, TwoRanksAgreeThroughTheFile) {
  std::unique_ptr<Communicator> self0 = make_self_communicator(), self1 = make_self_communicator();
  std::optional<Result<ncclUniqueId>> id1;
  std::thread rank1([&] { id1 = bootstrap_nccl_id(*self1, kRank1, 10.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 1 is already polling
  Result<ncclUniqueId> id0 = bootstrap_nccl_id(*self0, kRank0, 10.0);
  rank1.join();
  REQUIRE_NCCL_ID(id0);
  ASSERT_TRUE(id0.ok()) << id0.error();
  ASSERT_TRUE(id1->ok()) << id1->error();
  EXPECT_EQ(bytes_of(*id0), bytes_of(**id1));
  remove_nccl_id_file();
  EXPECT_FALSE(std::filesystem::exists(nccl_id_path()));
}

// Rank 0 replaces a file left under its name; rank 1, starting later, reads the new id.
TEST_F(RendezvousTest, RankZeroReplacesAStaleFile) {
  ASSERT_TRUE(write_rendezvous_file(nccl_id_path(), id_bytes(9)).ok());
  std::unique_ptr<Communicator> self = make_self_communicator();
  Result<ncclUniqueId> id0 = bootstrap_nccl_id(*self, kRank0, 10.0);
  REQUIRE_NCCL_ID(id0);
  ASSERT_TRUE(id0.ok()) << id0.error();
  Result<ncclUniqueId> id1 = bootstrap_nccl_id(*self, kRank1, 10.0);
  ASSERT_TRUE(id1.ok()) << id1.error();
  EXPECT_EQ(bytes_of(*id1), bytes_of(*id0));
  EXPECT_NE(bytes_of(*id1), id_bytes(9));
}

// A file from another launch (another Slurm job) has another name and is never read.
TEST_F(RendezvousTest, AnotherLaunchsFileIsIgnored) {
  env_.set("SLURM_JOB_ID", "41");
  ASSERT_TRUE(write_rendezvous_file(nccl_id_path(), id_bytes(9)).ok());
  env_.set("SLURM_JOB_ID", "42");
  std::unique_ptr<Communicator> self = make_self_communicator();
  Result<ncclUniqueId> id1 = bootstrap_nccl_id(*self, kRank1, 0.2);
  ASSERT_FALSE(id1.ok());
  EXPECT_NE(id1.error().find("nccl-id.42"), std::string::npos) << id1.error();
}

TEST_F(RendezvousTest, OneProcessNeedsNoFile) {
  std::unique_ptr<Communicator> self = make_self_communicator();
  Result<ncclUniqueId> id = bootstrap_nccl_id(*self, LaunchInfo{}, 0.1);
  REQUIRE_NCCL_ID(id);
  ASSERT_TRUE(id.ok()) << id.error();
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

// Two threads playing a two-rank MPI world: only broadcast is needed, and it copies floats as
// MPI does (bit for bit).
class TwoRankWorld final : public Communicator {
 public:
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<float> message;
    bool sent = false;
  };
  TwoRankWorld(int rank, Channel* channel) : rank_(rank), channel_(channel) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void broadcast(float* data, int64_t count, int root) override {
    std::unique_lock<std::mutex> lock(channel_->mu);
    if (rank_ == root) {
      channel_->message.assign(data, data + count);
      channel_->sent = true;
      channel_->cv.notify_all();
    } else {
      channel_->cv.wait(lock, [&] { return channel_->sent; });
      std::memcpy(data, channel_->message.data(), static_cast<size_t>(count) * sizeof(float));
    }
  }
  void all_reduce(float*, int64_t, ReduceOp) override {}
  void reduce_scatter(float*, const float*, int64_t) override {}
  void all_gather(float*, const float*, int64_t) override {}
  void send(const float*, int64_t, int, int) override {}
  void recv(float*, int64_t, int, int) override {}
  void send_async(const float*, int64_t, int, int) override {}
  void wait_sends() override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return nullptr; }

 private:
  int rank_;
  Channel* channel_;
};

TEST_F(RendezvousTest, AnMpiWorldBroadcastsTheIdAndWritesNoFile) {
  TwoRankWorld::Channel channel;
  TwoRankWorld world0(0, &channel), world1(1, &channel);
  std::optional<Result<ncclUniqueId>> id1;
  std::thread rank1([&] { id1 = bootstrap_nccl_id(world1, LaunchInfo{"mpirun", 1, 2, 1}, 1.0); });
  Result<ncclUniqueId> id0 = bootstrap_nccl_id(world0, LaunchInfo{"mpirun", 0, 2, 0}, 1.0);
  rank1.join();
  if (!id0.ok()) {
    ASSERT_FALSE(id1->ok());  // rank 0's failure reaches rank 1 instead of a hang
    GTEST_SKIP() << id0.error();
  }
  ASSERT_TRUE(id1->ok()) << id1->error();
  EXPECT_EQ(bytes_of(*id0), bytes_of(**id1));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
}  // namespace parallax
