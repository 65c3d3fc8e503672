// train: executes a plan on CPU ranks started by mpirun (or srun), or with --device cuda on GPUs
// (train_gpu.cc).
//   mpirun -np N build/bin/train --plan plan.json --model M [--steps K] [--seed S] [--format json|table]
// Rank 0 prints the losses per step, the median step time after a warm-up step, tokens/s, the
// peak memory over ranks from the runtime's allocator and the bytes each group kind sent.
#include <algorithm>
#include <csignal>
#include <chrono>
#include <iostream>

#include "runtime/buffer.h"
#include "runtime/checkpoint.h"
#include "runtime/launch.h"
#include "runtime/watchdog.h"
#include "runtime/mpi_communicator.h"
#include "runtime/trainer.h"
#include "simulator/trace.h"
#include "tools/cli.h"
#include "tools/train_common.h"

namespace parallax {

double steady_step_time(const std::vector<double>& times) {
  std::vector<double> v(times.begin() + (times.size() > 1 ? 1 : 0), times.end());
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Rank 0 prints it, in table runs only (json prints once at the end).
void print_step(const Plan& plan, int64_t step, int64_t steps, const StepStats& s, double time_s) {
  std::cout << "step " << step + 1 << "/" << steps << "  loss " << cli::fixed(s.loss, 6) << "  " << cli::fixed(time_s, 4)
            << " s  " << cli::fixed(static_cast<double>(plan.global_batch * plan.seq_len) / time_s, 0) << " tokens/s"
            << (plan.precision == Precision::kFp16 ? "  loss scale " + cli::fixed(s.loss_scale, 0) : "")
            << (s.skipped ? "  (skipped: overflow)" : "") << std::endl;
}

std::vector<StageOp> gather_stage_ops(const Plan& plan, const RankCoords& me, int world_rank, int world_size,
                                      const std::vector<OpRecord>& ops, const HostCollectives& c) {
  constexpr int kFields = 4;  // program op, tp flag, start us, duration us
  const bool representative = me.tp == 0 && me.dp == 0;
  float count = representative ? static_cast<float>(ops.size()) : 0.0f;
  c.all_reduce_max(&count, 1);
  const int64_t slots = static_cast<int64_t>(count) * kFields;
  std::vector<float> mine(slots, -1.0f), all(slots * world_size);
  for (size_t i = 0; representative && i < ops.size(); ++i) {
    const float rec[kFields] = {static_cast<float>(ops[i].op), ops[i].tp ? 1.0f : 0.0f,
                                static_cast<float>(ops[i].start_s * 1e6), static_cast<float>(ops[i].duration_s * 1e6)};
    std::copy(rec, rec + kFields, mine.begin() + static_cast<int64_t>(i) * kFields);
  }
  c.all_gather(all.data(), mine.data(), slots);
  std::vector<StageOp> measured;
  for (int r = 0; world_rank == 0 && r < world_size; ++r) {
    const int stage = RankGrid(plan).coords(r).pp;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      const float* rec = all.data() + (static_cast<int64_t>(r) * static_cast<int64_t>(count) + i) * kFields;
      if (rec[0] < 0) continue;
      measured.push_back({stage, {static_cast<int32_t>(rec[0]), rec[1] > 0, rec[2] * 1e-6, rec[3] * 1e-6}});
    }
  }
  return measured;
}

// Rank 0 prints before anyone leaves: a rank exiting first would make mpirun kill rank 0 with its
// line unwritten.
void fail_all(Communicator& world, const std::string& message) {
  if (world.rank() == 0) std::cerr << "train: error: " << message << std::endl;
  world.barrier();
  finalize_mpi();
  std::exit(2);
}

nlohmann::json measured_trace(const StepProgram& program, const ModelSpec& m, const std::vector<StageOp>& ops,
                              const nlohmann::json& metadata) {
  nlohmann::json events = nlohmann::json::array();
  for (int64_t stage = 0; stage < program.plan.pp; ++stage) add_track_names(events, static_cast<int>(stage));
  for (const StageOp& s : ops) {
    const StageProgram& sp = program.stages[s.stage];
    events.push_back(trace_event(s.stage, record_stream(sp, s.op), record_name(sp, s.op), s.op.start_s, s.op.duration_s));
  }
  nlohmann::json meta = metadata;
  meta["plan"] = plan_to_json(program.plan);
  meta["model"] = m.name;
  return trace_document(std::move(events), meta);
}

namespace {

using Options = TrainFlags;

// Rank 0 writes the last step of every stage's representative rank as a Chrome trace in the
// simulator's format: one process per pipeline stage.
void write_trace(const Options& o, const Plan& plan, const ModelSpec& m, Trainer& trainer, Communicator& world,
                 double step_time_s) {
  const HostCollectives c{[&](float* x, int64_t n) { world.all_reduce(x, n, ReduceOp::kMax); },
                          [&](float* out, const float* in, int64_t n) { world.all_gather(out, in, n); }};
  const std::vector<StageOp> measured =
      gather_stage_ops(plan, trainer.coords(), world.rank(), world.size(), trainer.last_step_ops(), c);
  if (world.rank() != 0) return;
  const nlohmann::json trace = measured_trace(
      trainer.program(), m, measured,
      {{"source", "parallax train"}, {"step_time_s", step_time_s},
       {"step_time_measured_as", "median of the steps after the first (warm-up); the events are the last step's"},
       {"peak_memory_bytes", MemoryTracker::peak_bytes()}});
  if (Status st = write_text_file(o.trace, trace.dump()); !st.ok()) cli::fail(st.error());
}


void report(const Options& o, const Plan& plan, Trainer& trainer, Communicator& world,
            const std::vector<double>& losses, const std::vector<double>& times, const std::vector<int64_t>& skipped,
            double loss_scale) {
  float peak_kib = static_cast<float>(MemoryTracker::peak_bytes() / 1024);
  float bytes[4] = {static_cast<float>(trainer.tp_bytes()), static_cast<float>(trainer.pp_bytes()),
                    static_cast<float>(trainer.dp_bytes()), static_cast<float>(trainer.cp_bytes())};
  world.all_reduce(&peak_kib, 1, ReduceOp::kMax);
  world.all_reduce(bytes, 4, ReduceOp::kMax);
  if (world.rank() != 0) return;
  const double step_s = steady_step_time(times);
  nlohmann::json j = {{"losses", losses},
                      {"step_time_s", step_s},
                      {"tokens_per_s", static_cast<double>(plan.global_batch * plan.seq_len) / step_s},
                      {"peak_memory_bytes", static_cast<int64_t>(peak_kib) * 1024},
                      {"comm_bytes", {{"tp", bytes[0]}, {"pp", bytes[1]}, {"dp", bytes[2]}, {"cp", bytes[3]}}},
                      {"ranks", plan.gpus()},
                      {"skipped_steps", skipped},
                      {"loss_scale", loss_scale}};
  if (o.format == "json") {
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "median step (steps 2.." << losses.size() << "; step 1 is warm-up) " << cli::fixed(step_s, 4) << " s, " << cli::fixed(j["tokens_per_s"].get<double>(), 0)
            << " tokens/s, peak memory " << cli::fixed(peak_kib / 1024.0, 1) << " MiB per rank\n";
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--plan", o.plan_file, "plan JSON")->required();
  app.add_option("--model", o.model, "Hugging Face config.json, or a name in models/")->required();
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  app.add_option("--seed", o.seed, "parameter initialization seed")->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate")->capture_default_str();
  app.add_flag("--decay-norms-and-biases", o.decay_norms_and_biases,
               "apply AdamW's weight decay to norm weights and biases too (default: matrices and embeddings only)");
  app.add_option("--format", o.format, "table|json")->capture_default_str();
  app.add_option("--trace", o.trace, "write the last step as a Chrome trace (the simulator's format)");
  app.add_option("--data", o.data, "train on a file of token ids (whitespace-separated) or bytes");
  app.add_option("--checkpoint", o.checkpoint, "directory for sharded checkpoints (written at the end)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also write one every N steps");
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --checkpoint");
  app.add_option("--watchdog-seconds", o.watchdog_s, "end a rank stuck this long in a collective")->capture_default_str();
  app.add_option("--fail-rank", o.fail_rank, "test hook: kill this rank ...");
  app.add_option("--fail-after-steps", o.fail_after_steps, "... after this many steps");
  app.add_option("--inject-overflow-step", o.inject_overflow_step, "test hook: an inf in rank 0's gradients at this step");
  app.add_option("--skip-step", o.skip_step, "test hook: skip this step's update (as an overflow would)");
  app.add_option("--device", o.device, "cpu|cuda (cuda: one rank per GPU, NCCL)")->capture_default_str();
  app.add_option("--emulate-rank", o.emulate_rank,
                 "cuda: run only this rank's share of the plan on one GPU, collectives replaced by stand-ins");
  app.add_option("--init", o.init, "exact (the CPU runtime's values) | fast (on-device fill, for benchmarks)")
      ->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "cuda: the GPU's peak for the plan's precision, to report MFU");
}

// Validates the flags, the launcher and the inputs; any problem ends every rank with exit 2.
TrainOptions prepare(const Options& o, const ModelSpec& m, Communicator& world) {
  if (o.format != "table" && o.format != "json") fail_all(world, "--format: unknown '" + o.format + "' (expected table|json)");
  if (o.device != "cpu" && o.device != "cuda") fail_all(world, "--device: unknown '" + o.device + "' (expected cpu|cuda)");
  if (o.init != "exact" && o.init != "fast") fail_all(world, "--init: unknown '" + o.init + "' (expected exact|fast)");
  if (o.device == "cpu" && (o.emulate_rank >= 0 || o.init != "exact" || o.peak_tflops > 0))
    fail_all(world, "--emulate-rank, --init fast and --peak-tflops need --device cuda");
  if (o.device == "cuda" && (!o.checkpoint.empty() || o.resume)) fail_all(world, "--device cuda does not checkpoint yet");
  if (o.device == "cuda" && o.fail_rank >= 0) fail_all(world, "--fail-rank is a test hook of the CPU runtime");
  if (o.steps < 0 || (o.steps == 0 && (o.checkpoint.empty() || o.resume)))
    fail_all(world, "--steps must be >= 1 (0 only with --checkpoint and no --resume: it writes the initial state)");
  if (o.watchdog_s <= 0) fail_all(world, "--watchdog-seconds must be > 0");
  if (o.resume && o.checkpoint.empty()) fail_all(world, "--resume needs --checkpoint DIR");
  Result<LaunchInfo> launch = launch_info_from_env();
  if (!launch.ok()) fail_all(world, launch.error());
  // GPU ranks may come from a launcher without MPI (train_gpu.cc checks them).
  if (o.device == "cpu")
    if (Status s = check_launch(*launch, world.size()); !s.ok()) fail_all(world, s.error());
  TrainOptions options;
  if (!o.data.empty()) {
    Result<std::vector<int>> tokens = read_token_file(o.data, m.vocab);
    if (!tokens.ok()) fail_all(world, tokens.error());
    options.data = std::move(tokens).value();
  }
  options.seed = o.seed;
  options.inject_overflow_step = o.inject_overflow_step;
  options.skip_step = o.skip_step;
  options.adam.lr = static_cast<float>(o.lr);
  options.decay_norms_and_biases = o.decay_norms_and_biases;
  return options;
}

// What a resumed run must match: the model, the batch and the data. The data position is the step;
// the random state is the seeds (initialization and synthetic tokens are counter-based functions
// of them). The plan may change: checkpoints reshard.
nlohmann::json run_identity(const Options& o, const Plan& plan, const ModelSpec& m, const TrainOptions& options) {
  const std::string data = options.data.empty()
                               ? std::string("synthetic")
                               : "fnv1a64:" + std::to_string(fnv1a64(std::string(
                                                  reinterpret_cast<const char*>(options.data.data()),
                                                  options.data.size() * sizeof(int))));
  return {{"model", m.name},           {"params_total", total_params(m)}, {"global_batch", plan.global_batch},
          {"seq_len", plan.seq_len},    {"seed", o.seed},                   {"data_seed", options.data_seed},
          {"data", data}};
}

// What a checkpoint's manifest records beside the identity: the counters a resumed run continues
// from, and the plan and world that wrote it.
nlohmann::json checkpoint_info(const Plan& plan, const Trainer& trainer, int world_size) {
  return {{"plan", plan_to_json(plan)},
          {"world_size", world_size},
          {"loss_scale", trainer.loss_scaler().scale},
          {"clean_steps", trainer.loss_scaler().clean_steps},
          {"updates", trainer.updates()}};
}

// Steps first..steps-1, checkpointing as asked; the fail-rank hook kills its rank on cue.
RunLog train_steps(const Options& o, const Plan& plan, Trainer& trainer, Communicator& world,
                   const nlohmann::json& identity, int64_t first) {
  RunLog log;
  for (int64_t step = first; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const StepStats stats = trainer.step(step);
    log.losses.push_back(stats.loss);
    if (stats.skipped) log.skipped.push_back(step);
    log.loss_scale = stats.loss_scale;
    log.times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (o.format == "table" && world.rank() == 0) print_step(plan, step, o.steps, stats, log.times.back());
    if (world.rank() == o.fail_rank && step + 1 - first == o.fail_after_steps) std::raise(SIGKILL);
    const bool last = step + 1 == o.steps, periodic = o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0;
    if (!o.checkpoint.empty() && (last || periodic))
      if (Status s = save_checkpoint(o.checkpoint, step + 1, trainer.export_state(), world, identity,
                                     checkpoint_info(plan, trainer, world.size()));
          !s.ok())
        fail_all(world, s.error());
  }
  return log;
}

int run(int argc, char** argv) {
  cli::set_tool_name("train");
  std::unique_ptr<Communicator> world = make_mpi_world(&argc, &argv);
  CLI::App app{"Train a model with a plan on CPU ranks (mpirun -np N train ...) or GPUs (--device cuda)."};
  Options o;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    if (world->rank() == 0) app.exit(e);
    finalize_mpi();
    return 0;
  } catch (const CLI::ParseError& e) {
    fail_all(*world, std::string(e.what()) + " (see --help)");
  }
  Result<ModelSpec> m = load_model(o.model);
  if (!m.ok()) fail_all(*world, m.error());
  Result<Plan> plan = load_plan(o.plan_file);
  if (!plan.ok()) fail_all(*world, plan.error());
  if (Status s = check_plan(*plan, *m, static_cast<int64_t>(1) << 20); !s.ok()) fail_all(*world, s.error());
  const TrainOptions options = prepare(o, *m, *world);
  if (o.device == "cuda") {
    const int code = run_gpu_training(o, *m, *plan, options, *world);
    world.reset();
    finalize_mpi();
    return code;
  }
  Watchdog dog(world->rank(), o.watchdog_s);
  std::unique_ptr<Communicator> watched_world = watched(make_mpi_world(&argc, &argv), &dog);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::create(*m, *plan, *watched_world, options);
  if (!trainer.ok()) fail_all(*world, trainer.error());
  const nlohmann::json identity = run_identity(o, *plan, *m, options);
  int64_t first = 0;
  if (o.resume) {
    Result<LoadedCheckpoint> ckpt = load_checkpoint(o.checkpoint, *watched_world, identity);
    if (!ckpt.ok()) fail_all(*world, ckpt.error());
    LossScaler scaler;
    scaler.scale = ckpt->manifest.value("loss_scale", 1.0f);
    scaler.clean_steps = ckpt->manifest.value("clean_steps", int64_t{0});
    if (Status s = (*trainer)->import_state(ckpt->tensors, ckpt->manifest.value("updates", int64_t{0}), scaler); !s.ok())
      fail_all(*world, o.checkpoint + ": " + s.error());
    first = ckpt->step;
  }
  if (o.steps == 0) {  // the initial state, as a checkpoint at step 0
    if (Status s = save_checkpoint(o.checkpoint, 0, (*trainer)->export_state(), *watched_world, identity,
                                   checkpoint_info(*plan, **trainer, world->size()));
        !s.ok())
      fail_all(*world, s.error());
    trainer = Error{"done"};
    watched_world.reset();
    world.reset();
    finalize_mpi();
    return 0;
  }
  const RunLog log = train_steps(o, *plan, **trainer, *watched_world, identity, first);
  if (log.losses.empty()) fail_all(*world, "nothing to do: the checkpoint is already at step " + std::to_string(first));
  report(o, *plan, **trainer, *watched_world, log.losses, log.times, log.skipped, log.loss_scale);
  // The trace's step time is the median train prints (its ops are the last step's), so that
  // compare and train state the same measured step.
  if (!o.trace.empty()) write_trace(o, *plan, *m, **trainer, *watched_world, steady_step_time(log.times));
  trainer = Error{"done"};  // release communicators before MPI_Finalize
  watched_world.reset();
  world.reset();
  finalize_mpi();
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::run(argc, argv); }
