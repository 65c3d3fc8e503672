// Buffer: the runtime's float storage. Every buffer is counted by a process-wide tracker, so the
// runtime reports its own memory high-water mark (what `train` prints as peak_memory_bytes)
// without asking the operating system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace parallax {

class MemoryTracker {
 public:
  static void allocate(size_t bytes);
  static void release(size_t bytes);
  static int64_t peak_bytes();
  static void reset_peak();
};

template <class T>
struct TrackingAllocator {
  using value_type = T;
  TrackingAllocator() = default;
  template <class U>
  TrackingAllocator(const TrackingAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) {
    MemoryTracker::allocate(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    MemoryTracker::release(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  bool operator==(const TrackingAllocator&) const { return true; }
};

using Buffer = std::vector<float, TrackingAllocator<float>>;

}  // namespace parallax
