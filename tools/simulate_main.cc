// simulate: predicts one training step of one plan (from --plan or from flags).
//   simulate --model M [--cluster C] (--plan PLAN.json | --tp T --pp P --dp D [--zero Z]
//            --micro-batch b --global-batch B [--schedule S] [--virtual-stages v] [--recompute R]
//            [--sequence-parallel] [--seq-len S] [--precision P]) [--trace OUT.json] [--format F]
// Until the discrete-event engine lands, the prediction is the planner's analytical estimate.
#include <iostream>

#include "models/json_fields.h"
#include "planner/estimate.h"
#include "planner/export.h"
#include "planner/search.h"
#include "planner/simulation.h"
#include "program/pipeline_layout.h"
#include "simulator/trace.h"
#include "tools/cli.h"

namespace parallax {
namespace {

constexpr double kGiB = 1073741824.0;

struct Options {
  std::string model, cluster = "dgx-h100", plan_file, format = "table", trace, svg, engine = "event";
  std::string schedule = "1f1b", recompute = "none", precision = "bf16";
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, zero = 0, micro_batch = 1, global_batch = 0, virtual_stages = 1, seq_len = 0;
  bool sequence_parallel = false, offload = false, tp_across_nodes = false;
  cli::ExecutionFlags execution;
};

Plan plan_from_flags(const Options& o, const CLI::App& app, const ModelSpec& m, nlohmann::json& defaults) {
  for (const char* flag : {"--tp", "--pp", "--dp", "--micro-batch"})
    if (!app.count(flag)) cli::fail(std::string(flag) + " is required without --plan");
  for (const auto& [flag, value] : {std::pair{"--tp", o.tp}, {"--pp", o.pp}, {"--dp", o.dp}, {"--cp", o.cp}, {"--ep", o.ep},
                                    {"--micro-batch", o.micro_batch}, {"--virtual-stages", o.virtual_stages}})
    if (value < 1) cli::fail(std::string(flag) + " must be >= 1, got " + std::to_string(value));
  if (o.zero < 0 || o.zero > 3) cli::fail("--zero must be 0, 1, 2 or 3, got " + std::to_string(o.zero));
  Plan p;
  p.tp = o.tp;
  p.pp = o.pp;
  p.dp = o.dp;
  p.cp = o.cp;
  p.ep = o.ep;
  p.zero = static_cast<int>(o.zero);
  p.micro_batch = o.micro_batch;
  p.seq_len = o.seq_len;
  if (!app.count("--seq-len")) {
    p.seq_len = default_seq_len(m);
    defaults["seq_len"] = p.seq_len;
  } else if (o.seq_len < 1) {
    cli::fail("--seq-len must be >= 1");
  }
  p.global_batch = o.global_batch;
  if (!app.count("--global-batch")) {
    p.global_batch = default_global_batch(p.seq_len, p.gpus());
    defaults["global_batch"] = p.global_batch;
  } else if (o.global_batch < 1) {
    cli::fail("--global-batch must be >= 1");
  }
  if (!app.count("--precision")) defaults["precision"] = o.precision;
  p.schedule = cli::parse_schedule_or_fail(o.schedule);
  p.virtual_stages = o.virtual_stages;
  p.recompute = cli::parse_recompute_or_fail(o.recompute);
  p.precision = cli::parse_precision_or_fail(o.precision);
  p.sequence_parallel = o.sequence_parallel;
  p.offload = o.offload;
  p.tp_across_nodes = o.tp_across_nodes;
  p.execution = cli::execution_or_fail(o.execution);
  return p;
}

// The plan file; --framework fills in execution.framework where the file names none.
Plan load_plan_or_fail(const std::string& path, const std::string& framework) {
  nlohmann::json j = cli::value_or_fail(read_json_file(path));
  if (!framework.empty() && j.is_object()) {
    nlohmann::json& e = j["execution"];
    if (e.is_null()) e = nlohmann::json::object();
    const bool named = e.is_object() && e.contains("framework") && e["framework"].is_string() &&
                       !e["framework"].get<std::string>().empty();
    if (named && e["framework"] != framework)
      cli::fail("--framework " + framework + " contradicts the plan's execution.framework " + e["framework"].dump());
    if (e.is_object()) e["framework"] = framework;
  }
  return cli::value_or_fail(plan_from_json(j, path));
}

void print_table(const ModelSpec& m, const ClusterSpec& c, const Plan& p, const StepReport& e,
                 const nlohmann::json& defaults, const std::string& engine) {
  auto gib = [](double b) { return cli::fixed(b / kGiB, 2) + " GiB"; };
  const std::optional<StepBand> band = cli::step_band_of(c, m, p, e.step_time_s);
  std::vector<std::vector<std::string>> rows = {
      {"step time", cli::fixed(e.step_time_s, 4) + " s"},
      {"  pipeline (incl. bubble)", cli::fixed(e.pipeline_s, 4) + " s"},
      {"  exposed DP/ZeRO comm", cli::fixed(e.dp_exposed_s, 4) + " s"},
      {"  optimizer", cli::fixed(e.optimizer_s, 4) + " s"},
      {"tokens/s", cli::fixed(e.tokens_per_s, 0)},
      {"MFU / HFU", cli::fixed(100 * e.mfu, 1) + " % / " + cli::fixed(100 * e.hfu, 1) + " %"},
      {"model / hardware TFLOP/s per GPU", cli::fixed(e.model_tflops_per_gpu, 1) + " / " + cli::fixed(e.hardware_tflops_per_gpu, 1)},
      {"  model FLOPs convention", e.flops_convention},
      {"  hardware FLOPs", p.execution.attention == AttentionKernel::kFlash
                               ? "as executed: causal flash computes 1/2 + 64/s of s^2; recompute included"
                               : "as executed: materialized attention computes all of s^2; recompute included"},
      {"bubble", cli::fixed(100 * e.bubble_fraction, 1) + " %"},
      {"peak memory per GPU", gib(e.peak_memory_bytes) + " (" + cli::fixed(100 * e.peak_memory_bytes / c.gpu.hbm_bytes(), 0) + " % of HBM)"},
      {"  weights / gradients / optimizer", gib(e.memory.weights) + " / " + gib(e.memory.gradients) + " / " + gib(e.memory.optimizer)},
      {"  activations / buffers / margin", gib(e.memory.activations) + " / " + gib(e.memory.buffers) + " / " + gib(e.memory.margin)},
 {"bytes per GPU over NVLink / network", cli::fixed(e.tier_bytes_per_gpu.nvlink / 1e9, 2) + " / " + cli::fixed(e.tier_bytes_per_gpu.network / 1e9, 2) + " GB"},
      {"comm per GPU tp / pp / dp", cli::fixed(e.comm_bytes_per_gpu.tp / 1e9, 2) + " / " + cli::fixed(e.comm_bytes_per_gpu.pp / 1e9, 2) + " / " + cli::fixed(e.comm_bytes_per_gpu.dp / 1e9, 2) + " GB"}};
  if (band) {
    // Measured steps of runs like this one fell in this band 8 times in 10 with their source held out.
    rows.insert(rows.begin() + 1, {"  10-90% band", cli::fixed(band->low_s, 4) + " - " + cli::fixed(band->high_s, 4) + " s"});
    rows.insert(rows.begin() + 7, {"  MFU 10-90% band", cli::fixed(100 * e.mfu * e.step_time_s / band->high_s, 1) + " - " +
                                                             cli::fixed(100 * e.mfu * e.step_time_s / band->low_s, 1) + " %"});
  }
  if (p.cp > 1 || p.ep > 1)
    rows.push_back({"comm per GPU cp / ep", cli::fixed(e.comm_bytes_per_gpu.cp / 1e9, 2) + " / " + cli::fixed(e.comm_bytes_per_gpu.ep / 1e9, 2) + " GB"});
  std::cout << "model " << m.name << " on " << p.gpus() << " x " << c.gpu.name << " (" << c.name << "): TP "
            << p.tp << (p.cp > 1 ? " CP " + std::to_string(p.cp) : "") << " PP " << p.pp << " DP " << p.dp
            << (p.ep > 1 ? " EP " + std::to_string(p.ep) : "") << " ZeRO " << p.zero << ", micro-batch " << p.micro_batch
            << " x " << p.micro_batches() << ", " << schedule_name(p.schedule)
            << (p.schedule == Schedule::kInterleaved ? " v=" + std::to_string(p.virtual_stages) : "")
            << (p.pipeline_layout.empty() ? "" : ", layout " + megatron_layout_string(p.pipeline_layout))
            << ", recompute " << recompute_name(p.recompute) << (p.sequence_parallel ? ", SP" : "")
            << ", seq_len " << p.seq_len << ", global batch " << p.global_batch << ", " << precision_name(p.precision)
            << "\n" << cli::describe_execution(p.execution) << "\n";
  if (m.is_moe()) std::cout << cli::moe_routing_line(m, p) << "\n";
  if (const std::string a = cli::attention_line(m, c, p.execution); !a.empty()) std::cout << a << "\n";
  if (!m.unpriced.empty()) std::cout << cli::unpriced_line(m) << "\n";
  if (!defaults.empty()) std::cout << "defaults chosen: " << defaults.dump() << "\n";
  std::cout << "engine: " << (engine == "event" ? "discrete-event simulation" : "analytical model") << "\n";
  std::cout << "calibration: "
            << (c.calibration.empty() ? "none (physics only)"
                                      : c.calibration.name + (band ? ", band of " + std::to_string(band->runs) + " held-out runs (" +
                                                                         band->run_class + ")"
                                                                   : std::string(", no bands")))
            << "\n\n" << cli::render_table({"quantity", "value"}, rows);
}

void print_stages(const nlohmann::json& stages) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : stages)
    rows.push_back({std::to_string(s["stage"].get<int>()), cli::fixed(s["busy_s"].get<double>(), 3),
                    cli::fixed(s["bubble_s"].get<double>(), 3), cli::fixed(s["exposed_s"]["tp"].get<double>(), 3),
                    cli::fixed(s["exposed_s"]["pp"].get<double>(), 3), cli::fixed(s["exposed_s"]["dp"].get<double>(), 3),
                    std::to_string(s["peak_in_flight"].get<int64_t>()),
                    cli::fixed(s["peak_memory_bytes"].get<double>() / kGiB, 2)});
  std::cout << "\n" << cli::render_table({"stage", "busy_s", "bubble_s", "tp_s", "pp_exposed_s", "dp_exposed_s",
                                          "in_flight", "peak_GiB"}, rows);
}

void write_pictures(const Options& o, const ModelSpec& m, const ClusterSpec& c, const Plan& plan,
                    const Simulation& sim) {
  if (!o.trace.empty()) {
    nlohmann::json meta = {{"source", "parallax simulate"}, {"plan", plan_to_json(plan)},
                           {"model", m.name}, {"cluster", c.name},
                           {"step_time_s", sim.report.step_time_s},
                           {"peak_memory_bytes", sim.report.peak_memory_bytes}};
    if (const std::optional<StepBand> b = cli::step_band_of(c, m, plan, sim.report.step_time_s))
      meta["step_time_band_s"] = {b->low_s, b->high_s};
    if (Status s = write_text_file(o.trace, simulation_trace(sim, meta).dump()); !s.ok()) cli::fail(s.error());
  }
  if (!o.svg.empty()) {
    const std::string title = m.name + " on " + std::to_string(plan.gpus()) + " x " + c.gpu.name + ": TP " +
                              std::to_string(plan.tp) + (plan.cp > 1 ? " CP " + std::to_string(plan.cp) : "") + " PP " +
                              std::to_string(plan.pp) + " DP " + std::to_string(plan.dp) +
                              (plan.ep > 1 ? " EP " + std::to_string(plan.ep) : "") + ", " + schedule_name(plan.schedule) +
                              ", step " + cli::fixed(sim.report.step_time_s, 3) + " s";
    if (Status s = write_text_file(o.svg, simulation_svg(sim, title)); !s.ok()) cli::fail(s.error());
  }
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model, "Hugging Face config.json, or a name in models/")->required();
  app.add_option("--cluster", o.cluster, "cluster JSON, or a name in clusters/")->capture_default_str();
  app.add_option("--plan", o.plan_file, "plan JSON (as planner --emit plan writes)");
  app.add_option("--tp", o.tp, "tensor-parallel degree");
  app.add_option("--pp", o.pp, "pipeline-parallel degree");
  app.add_option("--dp", o.dp, "data-parallel degree");
  app.add_option("--cp", o.cp, "context-parallel degree (each sequence split over cp GPUs)")->capture_default_str();
  app.add_option("--ep", o.ep, "expert-parallel degree (MoE experts split over ep of the cp x dp GPUs)")->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stage 0-3")->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "sequences per micro-batch");
  app.add_option("--global-batch", o.global_batch, "sequences per step (default: ~4M tokens)");
  app.add_option("--schedule", o.schedule, "gpipe|1f1b|interleaved|zb-h1")->capture_default_str();
  app.add_option("--virtual-stages", o.virtual_stages, "chunks per pipeline rank (interleaved)");
  app.add_option("--recompute", o.recompute, "none|selective|full")->capture_default_str();
  app.add_flag("--sequence-parallel", o.sequence_parallel, "Megatron sequence parallelism");
  app.add_flag("--offload", o.offload, "optimizer states (ZeRO-3: also weights) in host memory");
  app.add_flag("--tp-across-nodes", o.tp_across_nodes, "allow a TP group to span nodes");
  cli::add_execution_flags(app, o.execution);
  app.add_option("--seq-len", o.seq_len, "sequence length (default: min(max positions, 4096))");
  app.add_option("--precision", o.precision, "bf16|fp16|fp32|fp8 (FP8 GEMMs, Transformer Engine)")->capture_default_str();
  app.add_option("--trace", o.trace, "write the step as a Chrome / Perfetto trace (event engine)");
  app.add_option("--svg", o.svg, "draw the step as an SVG pipeline chart (event engine)");
  app.add_option("--format", o.format, "table|json")->capture_default_str();
  app.add_option("--engine", o.engine, "event (discrete-event simulator) | analytical (closed form)")
      ->capture_default_str();
}

int run(int argc, char** argv) {
  cli::set_tool_name("simulate");
  keep_freed_memory();
  CLI::App app{"Predict one training step of one plan."};
  Options o;
  add_options(app, o);
  cli::parse(app, argc, argv);
  if (o.engine != "event" && o.engine != "analytical")
    cli::fail("--engine: unknown '" + o.engine + "' (expected event|analytical)");
  if (o.engine == "analytical" && (!o.trace.empty() || !o.svg.empty()))
    cli::fail("--trace and --svg need --engine event");
  cli::require_format(o.format, {"table", "json"});

  const ModelSpec m = cli::load_model_or_fail(o.model);
  const ClusterSpec c = cli::load_cluster_or_fail(o.cluster, o.execution.calibration);
  nlohmann::json defaults = nlohmann::json::object();
  if (!o.plan_file.empty())
    for (const char* flag : {"--tp", "--pp", "--dp", "--cp", "--ep", "--zero", "--micro-batch", "--global-batch", "--schedule",
                             "--virtual-stages", "--recompute", "--sequence-parallel", "--seq-len", "--precision",
                             "--offload", "--tp-across-nodes", "--overlap-grad-reduce", "--fp32-gradients", "--compile",
                             "--cp-comm", "--moe-imbalance", "--moe-capacity-factor", "--fp8-recipe", "--fp8-param-gather", "--loss", "--attention-impl",
                             "--tp-comm-overlap", "--moe-a2a-overlap"})
      if (app.count(flag)) cli::fail(std::string(flag) + " cannot be combined with --plan (edit the plan file)");
  Plan plan = o.plan_file.empty() ? plan_from_flags(o, app, m, defaults) : load_plan_or_fail(o.plan_file, o.execution.framework);
  if (Status s = check_plan(plan, m, c.node.gpus); !s.ok()) cli::fail(s.error());
  if (std::string why = gpu_refusal(c, plan.precision, plan.execution.fp8_recipe); !why.empty()) cli::fail(why);
  if (c.max_nodes > 0 && plan.gpus() > c.max_nodes * c.node.gpus)
    cli::fail("plan needs " + std::to_string(plan.gpus()) + " GPUs; cluster '" + c.name + "' has " +
              std::to_string(c.max_nodes * c.node.gpus));

  StepReport e;
  nlohmann::json stages;
  if (o.engine == "analytical") {
    e = estimate_step(m, c, plan);
  } else {
    // A trace or chart needs every event; the report alone comes from three short steps.
    const bool pictures = !o.trace.empty() || !o.svg.empty();
    const Simulation sim = cli::value_or_fail(pictures ? simulate_step(m, c, plan) : simulate_report(m, c, plan));
    e = sim.report;
    stages = stage_reports_json(sim);
    write_pictures(o, m, c, plan, sim);
  }
  if (!e.fits_in_memory)
    cli::warn("plan does not fit in GPU memory: peak " + cli::fixed(e.peak_memory_bytes / kGiB, 1) + " GiB > " +
              cli::fixed(c.gpu.hbm_gib, 1) + " GiB");
  else if (e.peak_memory_bytes > 0.9 * c.gpu.hbm_bytes())
    cli::warn("peak " + cli::fixed(e.peak_memory_bytes / kGiB, 1) + " GiB is within 10% of the " +
              cli::fixed(c.gpu.hbm_gib, 1) + " GiB of HBM: allocator fragmentation beyond the " +
              cli::fixed(100 * plan.execution.allocator_margin, 0) + "% margin priced could exceed it");
  if (!e.fits_in_host_memory) cli::warn("offloaded state does not fit in host memory");
  if (o.format == "json") {
    nlohmann::json j = evaluation_to_json(m, plan, e);
    j["model"] = m.name;
    j["cluster"] = c.name;
    j["defaults"] = defaults;
    j["engine"] = o.engine;
    j["framework"] = cli::framework_json(plan.execution);
    j["model_unpriced"] = m.unpriced;
    j["moe_routing"] = cli::moe_routing_json(m, plan);
    j["attention_kernel"] = cli::attention_json(m, c, plan.execution);
    j["calibration"] = c.calibration.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.calibration.name);
    j["band"] = cli::band_json(c, m, plan, e.step_time_s, e.mfu);
    if (!stages.is_null()) j["stages"] = stages;
    std::cout << j.dump(2) << "\n";
  } else {
    print_table(m, c, plan, e, defaults, o.engine);
    if (!stages.is_null()) print_stages(stages);
  }
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::run(argc, argv); }
