#include "runtime/buffer.h"

#include <algorithm>
#include <atomic>

namespace parallax {

namespace {
std::atomic<int64_t> g_current{0}, g_peak{0};
}

void MemoryTracker::allocate(size_t bytes) {
  const int64_t now = g_current += static_cast<int64_t>(bytes);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
void MemoryTracker::release(size_t bytes) { g_current -= static_cast<int64_t>(bytes); }
int64_t MemoryTracker::peak_bytes() { return g_peak.load(); }
void MemoryTracker::reset_peak() { g_peak.store(g_current.load()); }

}  // namespace parallax
