// train --device cuda: one process per GPU (mpirun, srun or torchrun-style RANK / WORLD_SIZE /
// LOCAL_RANK on one node without MPI), NCCL bootstrapped over MPI or a rendezvous file; or, with
// --emulate-rank R, one GPU running rank R's share of any plan with stand-in collectives. Prints
// what the CPU path prints, plus the device, model FLOPs and MFU when --peak-tflops is given.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "models/layer_cost.h"
#include "simulator/trace.h"
#include "tools/cli.h"
#include "tools/train_common.h"

#ifdef PARALLAX_HAVE_CUDA
#include "kernels/cuda/common.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/gpu_trainer.h"
#include "runtime/cuda/nccl_bootstrap.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/launch.h"
#endif

namespace parallax {

#ifndef PARALLAX_HAVE_CUDA

int run_gpu_training(const TrainFlags&, const ModelSpec&, const Plan&, const TrainOptions&, Communicator& world) {
  fail_all(world, "--device cuda: this train was built without CUDA (no nvcc at configure time)");
}

#else

namespace {

using kernels::cuda::device_name;

// Host collectives over the NCCL world (device staging), or trivial ones for one process.
HostCollectives collectives(NcclCommunicator* world) {
  if (!world) return {[](float*, int64_t) {}, [](float* out, const float* in, int64_t n) { std::copy(in, in + n, out); }};
  auto stage = [](int64_t n) { return std::make_shared<DeviceArray<float>>(std::max<int64_t>(n, 1)); };
  auto up = [](float* dst, const float* src, int64_t n) {
    kernels::cuda::check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
  };
  auto down = [](float* dst, const float* src, int64_t n) {
    kernels::cuda::check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
  };
  return {[=](float* x, int64_t n) {
            auto d = stage(n);
            up(d->data(), x, n), world->all_reduce(d->data(), n, ReduceOp::kMax), down(x, d->data(), n);
          },
          [=](float* out, const float* in, int64_t n) {
            auto din = stage(n), dout = stage(n * world->size());
            up(din->data(), in, n), world->all_gather(dout->data(), din->data(), n);
            down(out, dout->data(), n * world->size());
          }};
}

// Rank 0 prints; peak memory and bytes are the largest over ranks, as on CPUs.
void report(const TrainFlags& o, const Plan& plan, const ModelSpec& m, GpuTrainer& t, const RunLog& run,
            const HostCollectives& c, bool root) {
  float worst[4] = {static_cast<float>(t.peak_memory_bytes() / 1024), static_cast<float>(t.tp_bytes()),
                    static_cast<float>(t.pp_bytes()), static_cast<float>(t.dp_bytes())};
  c.all_reduce_max(worst, 4);
  if (!root) return;
  const double step_s = steady_step_time(run.times);
  const int64_t peak = static_cast<int64_t>(worst[0]) * 1024;
  nlohmann::json j = {{"losses", run.losses},
                      {"step_time_s", step_s},
                      {"tokens_per_s", static_cast<double>(plan.global_batch * plan.seq_len) / step_s},
                      {"peak_memory_bytes", peak},
                      {"comm_bytes", {{"tp", worst[1]}, {"pp", worst[2]}, {"dp", worst[3]}}},
                      {"ranks", plan.gpus()},
                      {"skipped_steps", run.skipped},
                      {"loss_scale", run.loss_scale},
                      {"device", device_name()}};
  // One emulated rank of a larger plan has no bubbles and no communication: no whole-plan MFU
  // from it. Emulating a one-GPU plan is that plan's whole step.
  const double flops = model_flops_per_step(m, plan.seq_len, plan.global_batch);
  const double tflops_per_gpu = flops / (step_s * static_cast<double>(plan.gpus())) / 1e12;
  const bool whole_plan = o.emulate_rank < 0 || plan.gpus() == 1;
  if (o.emulate_rank >= 0) j["emulated_rank"] = o.emulate_rank, j["emulated_stage"] = t.coords().pp;
  if (whole_plan) {
    j["model_flops_per_step"] = flops, j["model_tflops_per_gpu"] = tflops_per_gpu;
    if (o.peak_tflops > 0) j["mfu"] = tflops_per_gpu / o.peak_tflops;
  }
  if (o.format == "json") {
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "median step (steps 2.." << run.losses.size() << "; step 1 is warm-up) " << cli::fixed(step_s, 4) << " s, " << cli::fixed(j["tokens_per_s"].get<double>(), 0)
            << " tokens/s, " << (!whole_plan ? "" : cli::fixed(tflops_per_gpu, 1) + " model TFLOP/s per GPU, ")
            << "peak memory " << cli::fixed(static_cast<double>(peak) / (1 << 30), 2) << " GiB on " << device_name()
            << "\n";
}

// Every stage's representative rank; under emulation, the one emulated rank's stage.
void write_gpu_trace(const TrainFlags& o, const Plan& plan, const ModelSpec& m, GpuTrainer& t, double step_s,
                     NcclCommunicator* world) {
  std::vector<StageOp> ops;
  if (world) {
    ops = gather_stage_ops(plan, t.coords(), world->rank(), world->size(), t.last_step_ops(), collectives(world));
    if (world->rank() != 0) return;
  } else {
    for (const OpRecord& r : t.last_step_ops()) ops.push_back({t.coords().pp, r});
  }
  nlohmann::json meta = {{"source", "parallax train --device cuda"}, {"device", device_name()},
                         {"step_time_s", step_s}, {"peak_memory_bytes", t.peak_memory_bytes()}};
  if (o.emulate_rank >= 0) meta["emulated_rank"] = o.emulate_rank;
  if (Status st = write_text_file(o.trace, measured_trace(t.program(), m, ops, meta).dump()); !st.ok()) cli::fail(st.error());
}

// The NCCL world: ranks from MPI when it has several, else from the launcher's environment.
std::unique_ptr<NcclCommunicator> nccl_world(const TrainFlags& o, Communicator& cpu_world) {
  Result<LaunchInfo> launch = launch_info_from_env();
  if (!launch.ok()) fail_all(cpu_world, launch.error());
  const bool mpi = cpu_world.size() > 1;
  const int rank = mpi ? cpu_world.rank() : launch->rank, size = mpi ? cpu_world.size() : launch->world_size;
  if (mpi && launch->launcher == "none")
    fail_all(cpu_world, "MPI started " + std::to_string(size) +
                            " ranks but no launcher variable gives each one's local rank (OMPI_COMM_WORLD_LOCAL_RANK, "
                            "MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK)");
  if (mpi)
    if (Status s = check_launch(*launch, size); !s.ok()) fail_all(cpu_world, s.error());
  int devices = 0;
  kernels::cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  // One visible device per process (srun --gpus-per-task, a CUDA_VISIBLE_DEVICES per rank) is
  // that rank's GPU whatever its local rank.
  const int device = devices == 1 ? 0 : launch->local_rank;
  if (device >= devices)
    fail_all(cpu_world, "local rank " + std::to_string(launch->local_rank) + " has no GPU (" +
                            std::to_string(devices) + " on this node)");
  Result<ncclUniqueId> id = bootstrap_nccl_id(cpu_world, *launch, o.watchdog_s);
  if (!id.ok()) fail_all(cpu_world, id.error());
  std::unique_ptr<NcclCommunicator> world = make_nccl_world(rank, size, *id, device, o.watchdog_s);
  if (rank == 0) remove_nccl_id_file();  // every rank has read it: NCCL's start-up needed them all
  return world;
}

}  // namespace

int run_gpu_training(const TrainFlags& o, const ModelSpec& m, const Plan& plan, const TrainOptions& options,
                     Communicator& cpu_world) {
  if (!kernels::cuda::device_available()) fail_all(cpu_world, "--device cuda: no CUDA device is visible");
  if (o.emulate_rank >= 0 && cpu_world.size() > 1) fail_all(cpu_world, "--emulate-rank runs as one process");
  GpuTrainOptions go{options, static_cast<int>(o.emulate_rank), o.init == "exact", o.watchdog_s};
  std::unique_ptr<NcclCommunicator> world;
  if (o.emulate_rank < 0) world = nccl_world(o, cpu_world);
  Result<std::unique_ptr<GpuTrainer>> trainer = GpuTrainer::create(m, plan, world.get(), go);
  if (!trainer.ok()) fail_all(cpu_world, trainer.error());
  RunLog run;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const Result<StepStats> stats = (*trainer)->step(step);  // returns synchronized
    if (!stats.ok()) {
      std::cerr << "train: error: " << stats.error() << std::endl;  // a CUDA failure: this rank cannot go on
      return 3;
    }
    run.times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (o.format == "table" && (!world || world->rank() == 0)) print_step(plan, step, o.steps, *stats, run.times.back());
    run.losses.push_back(stats->loss);
    if (stats->skipped) run.skipped.push_back(step);
    run.loss_scale = stats->loss_scale;
  }
  const bool root = world ? world->rank() == 0 : true;
  report(o, plan, m, **trainer, run, collectives(world.get()), root);
  if (!o.trace.empty()) write_gpu_trace(o, plan, m, **trainer, steady_step_time(run.times), world.get());
  trainer = Error{"done"};  // release the model and communicators before the process ends
  return 0;
}

#endif

}  // namespace parallax
