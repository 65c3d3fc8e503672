#include "runtime/cuda/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

namespace parallax {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

// What a failure names: the communicator to abort on a timeout and the rank to print.
struct Watch {
  ncclComm_t comm;
  int world_rank;
  double limit_s;
};

[[noreturn]] void die(int world_rank, std::string detail) {
  std::replace(detail.begin(), detail.end(), '\n', ' ');  // one line, whatever NCCL's text holds
  std::fprintf(stderr, "train: rank %d: %s\n", world_rank, detail.c_str());
  std::fflush(stderr);
  std::_Exit(3);  // no unwinding: destructors would wait on the communicator that failed
}

std::string op_label(const std::string& what, int64_t count) {
  return count < 0 ? what : what + " (count " + std::to_string(count) + ")";
}

[[noreturn]] void stuck(const Watch& w, const std::string& what, int64_t count, double waited_s) {
  // Abort first: it makes NCCL's kernels and proxy threads give up, so the exit cannot hang.
  if (w.comm) ncclCommAbort(w.comm);
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.0f", waited_s);
  die(w.world_rank, "NCCL " + op_label(what, count) + " stuck for " + waited + " s; communicator aborted");
}

void check(const Watch& w, ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(w.comm);
  std::string line = "NCCL " + what + " failed: " + ncclGetErrorString(result);
  if (last && *last) line += std::string(" (") + last + ")";
  die(w.world_rank, line);
}

void check_cuda(const Watch& w, cudaError_t result, const char* call) {
  if (result != cudaSuccess) die(w.world_rank, std::string(call) + " failed: " + cudaGetErrorString(result));
}

// Calls `ready` until it returns true, sleeping between polls from 1 µs doubling to 1 ms (short
// collectives cost little latency, long ones little CPU); past the limit, the watchdog fires.
template <class Ready>
void poll(const Watch& w, const std::string& what, int64_t count, Ready ready) {
  if (ready()) return;
  const Clock::time_point start = Clock::now();
  std::chrono::microseconds pause(1);
  while (!ready()) {
    const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited_s >= w.limit_s) stuck(w, what, count, waited_s);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

// Polls `comm`'s asynchronous state until it leaves ncclInProgress; an error ends the process.
void settle_comm(const Watch& w, ncclComm_t comm, const std::string& what, int64_t count) {
  const Watch target{comm, w.world_rank, w.limit_s};
  poll(target, what, count, [&] {
    ncclResult_t state = ncclSuccess;
    check(target, ncclCommGetAsyncError(comm, &state), what);
    check(target, state, what);
    return state != ncclInProgress;
  });
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

size_t elements(int64_t count) { return static_cast<size_t>(count); }

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int world_rank, double watchdog_s)
    : comm_(comm), world_rank_(world_rank), watchdog_s_(watchdog_s) {
  const Watch w{comm_, world_rank_, watchdog_s_};
  check(w, ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
  check(w, ncclCommCount(comm_, &size_), "ncclCommCount");
  check(w, ncclCommCuDevice(comm_, &device_), "ncclCommCuDevice");
  check_cuda(w, cudaSetDevice(device_), "cudaSetDevice");
  // Non-blocking: the legacy default stream must not serialize with communication.
  check_cuda(w, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check_cuda(w, cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}

NcclCommunicator::~NcclCommunicator() {
  // Copies never issued belong to a caller that skipped wait_sends(); sending them now could hang.
  // Their copies run on the legacy stream: let them finish before the blocks go back to the cache.
  cudaStreamSynchronize(cudaStreamLegacy);
  pending_.clear();
  finish("shutdown", -1);
  const Watch w{comm_, world_rank_, watchdog_s_};
  check(w, ncclCommFinalize(comm_), "finalize");  // flushes work still queued on other streams
  settle_comm(w, comm_, "finalize", -1);
  check(w, ncclCommDestroy(comm_), "destroy");
  barrier_word_.reset();
  cudaEventDestroy(event_);
  cudaStreamDestroy(stream_);
}

void NcclCommunicator::settle(ncclResult_t result, const std::string& what, int64_t count) {
  const Watch w{comm_, world_rank_, watchdog_s_};
  check(w, result, what);
  if (group_depth_ == 0) settle_comm(w, comm_, what, count);
}

void NcclCommunicator::fence_default_stream() {
  const Watch w{comm_, world_rank_, watchdog_s_};
  check_cuda(w, cudaEventRecord(event_, cudaStreamLegacy), "cudaEventRecord");
  check_cuda(w, cudaStreamWaitEvent(stream_, event_, 0), "cudaStreamWaitEvent");
}

void NcclCommunicator::wait(cudaStream_t stream, const char* what, int64_t count) {
  const Watch w{comm_, world_rank_, watchdog_s_};
  check_cuda(w, cudaEventRecord(event_, stream), "cudaEventRecord");
  poll(w, what, count, [&] {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) check_cuda(w, status, "cudaEventQuery");
    // A peer's failure surfaces here while our kernels wait for it.
    ncclResult_t state = ncclSuccess;
    check(w, ncclCommGetAsyncError(comm_, &state), what);
    check(w, state, what);
    return false;
  });
}

void NcclCommunicator::finish(const std::string& what, int64_t count) {
  wait(stream_, what.c_str(), count);
  in_flight_.clear();
}

// ---- Stream-ordered calls ------------------------------------------------------------------

void NcclCommunicator::all_reduce_async(void* data, int64_t count, DType type, ReduceOp op, cudaStream_t stream) {
  issue_pending_sends();
  settle(ncclAllReduce(data, data, elements(count), nccl_type(type), nccl_op(op), comm_, stream), "all-reduce", count);
  count_bytes(2.0 * (size_ - 1) / size_ * static_cast<double>(count) * dtype_bytes(type));
}

void NcclCommunicator::reduce_scatter_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) {
  issue_pending_sends();
  settle(ncclReduceScatter(in, out, elements(count), nccl_type(type), ncclSum, comm_, stream), "reduce-scatter", count);
  count_bytes(static_cast<double>(size_ - 1) * static_cast<double>(count) * dtype_bytes(type));
}

void NcclCommunicator::all_gather_async(void* out, const void* in, int64_t count, DType type, cudaStream_t stream) {
  issue_pending_sends();
  settle(ncclAllGather(in, out, elements(count), nccl_type(type), comm_, stream), "all-gather", count);
  count_bytes(static_cast<double>(size_ - 1) * static_cast<double>(count) * dtype_bytes(type));
}

void NcclCommunicator::group_start() {
  issue_pending_sends();
  check(Watch{comm_, world_rank_, watchdog_s_}, ncclGroupStart(), "group start");  // enqueues nothing to wait for
  ++group_depth_;
}

void NcclCommunicator::group_end() {
  --group_depth_;
  settle(ncclGroupEnd(), "send/receive group", -1);
}

void NcclCommunicator::send_async(const void* data, int64_t count, DType type, int peer, cudaStream_t stream) {
  issue_pending_sends();
  settle(ncclSend(data, elements(count), nccl_type(type), peer, comm_, stream), "send", count);
  count_bytes(static_cast<double>(count) * dtype_bytes(type));
}

void NcclCommunicator::recv_async(void* data, int64_t count, DType type, int peer, cudaStream_t stream) {
  issue_pending_sends();
  settle(ncclRecv(data, elements(count), nccl_type(type), peer, comm_, stream),
         "receive from group rank " + std::to_string(peer), count);
}

// ---- Blocking float calls --------------------------------------------------------------------

void NcclCommunicator::all_reduce(float* data, int64_t count, ReduceOp op) {
  fence_default_stream();
  all_reduce_async(data, count, DType::kF32, op, stream_);
  finish("all-reduce", count);
}

void NcclCommunicator::reduce_scatter(float* out, const float* in, int64_t count) {
  fence_default_stream();
  reduce_scatter_async(out, in, count, DType::kF32, stream_);
  finish("reduce-scatter", count);
}

void NcclCommunicator::all_gather(float* out, const float* in, int64_t count) {
  fence_default_stream();
  all_gather_async(out, in, count, DType::kF32, stream_);
  finish("all-gather", count);
}

void NcclCommunicator::broadcast(float* data, int64_t count, int root) {
  issue_pending_sends();
  fence_default_stream();
  settle(ncclBroadcast(data, data, elements(count), ncclFloat32, root, comm_, stream_), "broadcast", count);
  if (rank_ == root) count_bytes(static_cast<double>(count) * sizeof(float));  // as the MPI communicator counts
  finish("broadcast", count);
}

void NcclCommunicator::barrier() {
  issue_pending_sends();
  if (barrier_word_.empty()) {
    barrier_word_ = DeviceArray<float>(1);
    const Watch w{comm_, world_rank_, watchdog_s_};
    check_cuda(w, cudaMemsetAsync(barrier_word_.data(), 0, sizeof(float), stream_), "cudaMemsetAsync");
  }
  // A maximum of zeros stays zero however many barriers run; a barrier moves no counted bytes.
  settle(ncclAllReduce(barrier_word_.data(), barrier_word_.data(), 1, ncclFloat32, ncclMax, comm_, stream_), "barrier",
         -1);
  finish("barrier", -1);
}

void NcclCommunicator::issue_pending_sends() {
  if (pending_.empty()) return;
  std::vector<PendingSend> sends = std::move(pending_);
  pending_.clear();
  check(Watch{comm_, world_rank_, watchdog_s_}, ncclGroupStart(), "group start");
  ++group_depth_;
  for (PendingSend& s : sends) {
    settle(ncclSend(s.copy.data(), elements(s.copy.size()), ncclFloat32, s.peer, comm_, stream_), "send", s.copy.size());
    in_flight_.push_back(std::move(s.copy));
  }
  --group_depth_;
  settle(ncclGroupEnd(), "send group", -1);
}

template <class Op>
void NcclCommunicator::grouped_p2p(const std::string& what, int64_t count, Op op) {
  fence_default_stream();
  check(Watch{comm_, world_rank_, watchdog_s_}, ncclGroupStart(), "group start");
  ++group_depth_;
  issue_pending_sends();
  op();
  --group_depth_;
  settle(ncclGroupEnd(), what, count);
  finish(what, count);
}

void NcclCommunicator::send(const float* data, int64_t count, int peer, int) {
  grouped_p2p("send", count, [&] { settle(ncclSend(data, elements(count), ncclFloat32, peer, comm_, stream_), "send", count); });
  count_bytes(static_cast<double>(count) * sizeof(float));
}

void NcclCommunicator::recv(float* data, int64_t count, int peer, int) {
  const std::string what = "receive from group rank " + std::to_string(peer);
  grouped_p2p(what, count, [&] { settle(ncclRecv(data, elements(count), ncclFloat32, peer, comm_, stream_), what, count); });
}

// The copy runs on the default stream, in order with the caller's work: after what produced
// `data` and before anything issued later that overwrites it, so the caller may reuse `data` at
// once, as with MPI_Isend from a copy. The send itself waits for this communicator's next call.
void NcclCommunicator::send_async(const float* data, int64_t count, int peer, int) {
  PendingSend s{DeviceArray<float>(count), peer};
  if (count > 0) {
    const Watch w{comm_, world_rank_, watchdog_s_};
    check_cuda(w,
               cudaMemcpyAsync(s.copy.data(), data, elements(count) * sizeof(float), cudaMemcpyDeviceToDevice,
                               cudaStreamLegacy),
               "cudaMemcpyAsync");
  }
  fence_default_stream();  // the send, on the own stream, follows the copy
  pending_.push_back(std::move(s));
  count_bytes(static_cast<double>(count) * sizeof(float));
}

void NcclCommunicator::wait_sends() {
  issue_pending_sends();
  finish("wait for sends", -1);
}

// ---- Groups ----------------------------------------------------------------------------------

std::unique_ptr<DeviceCommunicator> NcclCommunicator::split_device(int color, int key) {
  issue_pending_sends();
  const Watch w{comm_, world_rank_, watchdog_s_};
  ncclConfig_t config = non_blocking_config();
  ncclComm_t sub = nullptr;
  check(w, ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, &config), "split");
  // A non-blocking split may leave `sub` null until NCCL's background thread has built the child,
  // and the parent stays in progress until then: settle the parent first, then the child.
  settle_comm(w, comm_, "split", -1);
  sub = __atomic_load_n(&sub, __ATOMIC_ACQUIRE);
  if (!sub) return nullptr;
  settle_comm(w, sub, "split", -1);
  return std::make_unique<NcclCommunicator>(sub, world_rank_, watchdog_s_);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) { return split_device(color, key); }

std::unique_ptr<NcclCommunicator> make_nccl_world(int rank, int world_size, const ncclUniqueId& id, int device,
                                                  double watchdog_s) {
  const Watch w{nullptr, rank, std::max(watchdog_s, kNcclInitTimeoutS)};
  check_cuda(w, cudaSetDevice(device), "cudaSetDevice");
  ncclConfig_t config = non_blocking_config();
  ncclComm_t comm = nullptr;
  const std::string what = "init of a " + std::to_string(world_size) + "-rank communicator";
  check(w, ncclCommInitRankConfig(&comm, world_size, id, rank, &config), what);
  settle_comm(w, comm, what, -1);
  return std::make_unique<NcclCommunicator>(comm, rank, watchdog_s);
}

}  // namespace parallax
