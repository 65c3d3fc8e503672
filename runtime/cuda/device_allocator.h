// DeviceAllocator: a caching allocator for device memory, so the step loop never calls cudaMalloc
// or cudaFree (each synchronizes the device). Freed blocks are kept in per-size free lists and
// reused; the allocator reports the bytes in use, their high-water mark (what `train` reports as
// peak_memory_bytes on GPUs, comparable with the simulator's peak) and the bytes reserved from the
// driver. Sizes are rounded up to 512 bytes (blocks under 1 MiB) or to 2 MiB; one allocator per
// process and device, used from one host thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace parallax {

class DeviceAllocator {
 public:
  static DeviceAllocator& instance();

  // Throws std::bad_alloc (after releasing the cache and retrying once) when the device is full.
  void* allocate(size_t bytes);
  void release(void* ptr);
  // Returns cached, unused blocks to the driver.
  void empty_cache();

  int64_t in_use_bytes() const { return in_use_; }
  int64_t peak_bytes() const { return peak_; }
  int64_t reserved_bytes() const { return reserved_; }
  void reset_peak() { peak_ = in_use_; }
  static size_t round_size(size_t bytes);

 private:
  DeviceAllocator() = default;
  std::multimap<size_t, void*> free_;           // size -> block
  std::unordered_map<void*, size_t> live_;      // block -> size
  int64_t in_use_ = 0, peak_ = 0, reserved_ = 0;
};

// An owning, typed device array from the DeviceAllocator.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(int64_t count) : count_(count) {
    if (count > 0) ptr_ = static_cast<T*>(DeviceAllocator::instance().allocate(static_cast<size_t>(count) * sizeof(T)));
  }
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr, o.count_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) reset(), ptr_ = o.ptr_, count_ = o.count_, o.ptr_ = nullptr, o.count_ = 0;
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void reset() {
    if (ptr_) DeviceAllocator::instance().release(ptr_);
    ptr_ = nullptr, count_ = 0;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  int64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

 private:
  T* ptr_ = nullptr;
  int64_t count_ = 0;
};

}  // namespace parallax
