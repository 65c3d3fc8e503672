#include "runtime/cuda/device_allocator.h"

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <new>

// Deliberately simple: a freed block goes back to the free list of its rounded size and is
// handed out again only for a request of exactly that rounded size. Blocks are never split or
// merged, so a mix of many distinct large sizes can hold more reserved memory than a splitting
// allocator would; the step loop requests the same sizes every step, which is the case this serves.
//
// The allocator is not stream-aware: release() makes a block reusable at once. That is safe when
// the block's next user is ordered after its last use (the same stream, or an event the second
// stream waits on), which is how the GPU trainer fences its communication stream.

namespace parallax {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // blocks of at most 1 MiB use the fine granularity
constexpr size_t kSmallGranularity = 512;
constexpr size_t kLargeGranularity = size_t{2} << 20;

size_t round_up(size_t bytes, size_t granularity) { return (bytes + granularity - 1) / granularity * granularity; }

}  // namespace

DeviceAllocator& DeviceAllocator::instance() {
  // Never destroyed: freeing device memory from a static destructor would race the CUDA runtime's
  // own teardown, and the driver reclaims everything at process exit anyway.
  static DeviceAllocator* allocator = new DeviceAllocator();
  return *allocator;
}

// A request of 0 bytes still gets a 512-byte block, so every allocation is a distinct pointer
// that release() can find.
size_t DeviceAllocator::round_size(size_t bytes) {
  if (bytes <= kSmallLimit) return bytes == 0 ? kSmallGranularity : round_up(bytes, kSmallGranularity);
  return round_up(bytes, kLargeGranularity);
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  void* ptr = nullptr;
  if (auto it = free_.find(size); it != free_.end()) {
    ptr = it->second;
    free_.erase(it);
  } else {
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // an out-of-memory error is not sticky; clear it before retrying
      empty_cache();
      err = cudaMalloc(&ptr, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw std::bad_alloc();
      }
    }
    // Anything else (a sticky error from an earlier kernel, no device) is not "out of memory".
    if (err != cudaSuccess)
      throw std::runtime_error(std::string("DeviceAllocator: cudaMalloc of ") + std::to_string(size) +
                               " bytes: " + cudaGetErrorString(err));
    reserved_ += static_cast<int64_t>(size);
  }
  live_.emplace(ptr, size);
  in_use_ += static_cast<int64_t>(size);
  if (in_use_ > peak_) peak_ = in_use_;
  return ptr;
}

void DeviceAllocator::release(void* ptr) {
  if (!ptr) return;
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    // A double free or a pointer from elsewhere: continuing would corrupt the free lists.
    std::fprintf(stderr, "DeviceAllocator: release of %p, which it did not allocate or already released\n", ptr);
    std::abort();
  }
  in_use_ -= static_cast<int64_t>(it->second);
  free_.emplace(it->second, ptr);
  live_.erase(it);
}

void DeviceAllocator::empty_cache() {
  for (const auto& [size, ptr] : free_) {
    cudaFree(ptr);
    reserved_ -= static_cast<int64_t>(size);
  }
  free_.clear();
}

}  // namespace parallax
