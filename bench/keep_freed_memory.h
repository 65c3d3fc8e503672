// The benchmarks run as planner and simulate do (tools/cli.h keep_freed_memory): freed arrays stay
// in the process instead of going back to the kernel, which would zero fresh pages on reuse.
#pragma once

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace parallax::bench {

[[maybe_unused]] inline const bool kKeepFreedMemory = [] {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  return true;
}();

}  // namespace parallax::bench
