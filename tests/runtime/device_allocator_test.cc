#include "runtime/cuda/device_allocator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <new>

namespace parallax {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

// Blocks of at most 1 MiB round up to a multiple of 512 bytes, larger ones to a multiple of 2 MiB.
TEST(DeviceAllocatorRoundSize, SmallBlocksRoundTo512Bytes) {
  EXPECT_EQ(DeviceAllocator::round_size(0), 512u);  // the smallest block, so every pointer is distinct
  EXPECT_EQ(DeviceAllocator::round_size(1), 512u);
  EXPECT_EQ(DeviceAllocator::round_size(512), 512u);
  EXPECT_EQ(DeviceAllocator::round_size(513), 1024u);
  EXPECT_EQ(DeviceAllocator::round_size(1000), 1024u);
  EXPECT_EQ(DeviceAllocator::round_size(kMiB - 1), kMiB);  // 2048 · 512
  EXPECT_EQ(DeviceAllocator::round_size(kMiB), kMiB);      // exactly 1 MiB is still a small block
}

TEST(DeviceAllocatorRoundSize, LargeBlocksRoundTo2MiB) {
  EXPECT_EQ(DeviceAllocator::round_size(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(DeviceAllocator::round_size(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(DeviceAllocator::round_size(3 * kMiB), 4 * kMiB);
  EXPECT_EQ(DeviceAllocator::round_size(4 * kMiB + 1), 6 * kMiB);
  // 1e9 B / 2 MiB = 476.84, so 477 · 2,097,152 = 1,000,341,504 B.
  EXPECT_EQ(DeviceAllocator::round_size(1'000'000'000), 1'000'341'504u);
}

// A freed block comes back for any request of the same rounded size, without a new cudaMalloc.
TEST(DeviceAllocator, ReusesAFreedBlockOfTheSameSizeClass) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  void* first = a.allocate(1000);  // 1024 B
  const int64_t reserved = a.reserved_bytes(), in_use = a.in_use_bytes();
  a.release(first);
  EXPECT_EQ(a.in_use_bytes(), in_use - 1024);
  void* second = a.allocate(700);  // also 1024 B
  EXPECT_EQ(second, first);
  EXPECT_EQ(a.reserved_bytes(), reserved);
  EXPECT_EQ(a.in_use_bytes(), in_use);
  a.release(second);
}

// No splitting: a cached 1024-byte block does not serve a 2048-byte request.
TEST(DeviceAllocator, OtherSizeClassesGetTheirOwnBlocks) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  void* small = a.allocate(1024);
  a.release(small);
  const int64_t reserved = a.reserved_bytes();
  void* larger = a.allocate(2048);
  EXPECT_NE(larger, small);
  EXPECT_EQ(a.reserved_bytes(), reserved + 2048);
  a.release(larger);
}

// The high-water mark counts rounded bytes: 3 MiB -> 4 MiB, 1 KiB -> 1 KiB.
TEST(DeviceAllocator, PeakCountsRoundedBytesInUse) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  a.reset_peak();
  const int64_t base = a.in_use_bytes();
  void* big = a.allocate(3 * kMiB);
  void* small = a.allocate(1024);
  EXPECT_EQ(a.in_use_bytes(), base + static_cast<int64_t>(4 * kMiB + 1024));
  a.release(big);
  a.release(small);
  EXPECT_EQ(a.in_use_bytes(), base);
  EXPECT_EQ(a.peak_bytes(), base + static_cast<int64_t>(4 * kMiB + 1024));
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), base);
}

TEST(DeviceAllocator, EmptyCacheReturnsOnlyUnusedBlocks) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  a.empty_cache();
  void* kept = a.allocate(512);
  void* cached = a.allocate(6 * kMiB);
  a.release(cached);
  EXPECT_EQ(a.reserved_bytes(), a.in_use_bytes() + static_cast<int64_t>(6 * kMiB));
  a.empty_cache();
  EXPECT_EQ(a.reserved_bytes(), a.in_use_bytes());  // the block still in use stays reserved
  a.release(kept);
}

// Far beyond any device: the cache is emptied, the retry fails too, and the caller gets bad_alloc.
TEST(DeviceAllocator, ThrowsBadAllocWhenTheDeviceIsFull) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  a.release(a.allocate(2 * kMiB));  // something in the cache
  const int64_t in_use = a.in_use_bytes();
  EXPECT_THROW(a.allocate(size_t{1} << 50), std::bad_alloc);  // 1 PiB
  EXPECT_EQ(a.in_use_bytes(), in_use);
  EXPECT_EQ(a.reserved_bytes(), in_use);  // the retry released the cache
}

TEST(DeviceArray, ReleasesItsBlockAndMoves) {
  REQUIRE_DEVICE();
  DeviceAllocator& a = DeviceAllocator::instance();
  const int64_t base = a.in_use_bytes();
  {
    DeviceArray<float> x(1000);  // 4000 B -> 4096 B
    EXPECT_EQ(a.in_use_bytes(), base + 4096);
    DeviceArray<float> y = std::move(x);
    EXPECT_TRUE(x.empty());
    EXPECT_EQ(y.size(), 1000);
    EXPECT_EQ(a.in_use_bytes(), base + 4096);
  }
  EXPECT_EQ(a.in_use_bytes(), base);
}

}  // namespace
}  // namespace parallax
