// ThreadCommunicator: a DeviceCommunicator whose ranks are host threads of one test process on
// one GPU — an in-memory fake for the tests that need real data-parallel sums between GpuTrainer
// ranks, which NCCL cannot give there (it refuses two ranks on one device).
//
// Ranks take turns. A rank runs only while it holds the world's baton (one mutex) and gives it up
// only while it waits in a collective for the rest of its group, after synchronizing the device:
// the per-process state the GPU runtime builds for one host thread (the caching allocator, the
// cuBLASLt handle and workspace) therefore serves one rank at a time, and no two ranks' kernels
// overlap. A collective completes when the last rank of its group calls it: that rank performs it
// through host copies, summing in rank order (deterministic), and wakes the others. The typed
// *_async calls are performed the same way and are complete on return. Point-to-point calls are
// not supported (pipelines need NCCL's grouped sends); they throw.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/cuda/device_communicator.h"

namespace parallax::testing_support {

// Runs body(world) on `ranks` threads, each with its rank's world communicator, taking turns as
// above; returns when all have finished: "" or the first rank's error (an exception in a body;
// the other ranks' collectives then fail instead of waiting for it).
std::string run_thread_ranks(int ranks, const std::function<void(DeviceCommunicator& world)>& body);

}  // namespace parallax::testing_support
