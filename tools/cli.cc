#include "tools/cli.h"

#include <unistd.h>

#include <cmath>
#include <numeric>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "program/framework.h"
#include "simulator/compute_cost.h"
#include "simulator/step_costs.h"

namespace parallax::cli {

namespace {
std::string g_tool = "parallax";
}

Progress::Progress(std::string tool, bool quiet) : tool_(std::move(tool)), start_(std::chrono::steady_clock::now()) {
  enabled_ = !quiet && isatty(STDERR_FILENO);
  if (const char* after = std::getenv("PARALLAX_PROGRESS_AFTER_S")) after_s_ = std::atof(after);
}

void Progress::show(const std::string& line) {
  const auto now = std::chrono::steady_clock::now();
  if (!enabled_ || std::chrono::duration<double>(now - start_).count() < after_s_ ||
      (shown_ && now - last_ < std::chrono::milliseconds(100)))
    return;
  std::cerr << "\r\033[K" << tool_ << ": " << line << std::flush;
  shown_ = true;
  last_ = now;
}

void Progress::clear() {
  if (shown_) std::cerr << "\r\033[K" << std::flush;
  shown_ = false;
}

void set_tool_name(const std::string& name) { g_tool = name; }

void fail(const std::string& message) {
  std::cout.flush();
  std::cerr << g_tool << ": error: " << message << "\n";
  std::exit(2);
}

void warn(const std::string& message) { std::cerr << g_tool << ": warning: " << message << "\n"; }

void parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    fail(what + " (see --help)");
  }
}

ModelSpec load_model_or_fail(const std::string& name_or_path) { return value_or_fail(load_model(name_or_path)); }
ClusterSpec load_cluster_or_fail(const std::string& name_or_path, const std::string& calibration) {
  ClusterSpec c = value_or_fail(load_cluster(name_or_path));
  const std::string ref = calibration.empty() ? c.calibration_ref : calibration;
  if (!ref.empty() && ref != "none") {
    Result<Calibration> cal = load_calibration(ref);
    if (!cal.ok()) fail((calibration.empty() ? c.name + ": calibration: " : "--calibration: ") + cal.error());
    apply_calibration(c, *cal);
  }
  return c;
}

std::optional<StepBand> step_band_of(const ClusterSpec& c, const ModelSpec& m, const Plan& p, double step_s) {
  return step_band(c.calibration, run_class(p.execution.framework, m.is_moe()), step_s);
}

std::string band_suffix(const std::optional<StepBand>& b, int decimals) {
  return b ? " (" + fixed(b->low_s, decimals) + "-" + fixed(b->high_s, decimals) + ")" : "";
}

nlohmann::json band_json(const ClusterSpec& c, const ModelSpec& m, const Plan& p, double step_s, double mfu) {
  const std::optional<StepBand> b = step_band_of(c, m, p, step_s);
  if (!b) return nullptr;
  // MFU is work over time: its band is the step band inverted.
  return {{"step_time_s", {b->low_s, b->high_s}}, {"mfu", {mfu * step_s / b->high_s, mfu * step_s / b->low_s}},
          {"class", b->run_class}, {"runs", b->runs}, {"calibration", c.calibration.name}};
}

Precision parse_precision_or_fail(const std::string& text) {
  if (auto p = parse_precision(text)) return *p;
  fail("--precision: unknown '" + text + "' (expected fp32|bf16|fp16|fp8)");
}
Schedule parse_schedule_or_fail(const std::string& text) {
  if (auto s = parse_schedule(text)) return *s;
  fail("--schedule: unknown '" + text + "' (expected gpipe|1f1b|interleaved|zb-h1)");
}
Recompute parse_recompute_or_fail(const std::string& text) {
  if (auto r = parse_recompute(text)) return *r;
  fail("--recompute: unknown '" + text + "' (expected none|selective|full)");
}

void add_execution_flags(CLI::App& app, ExecutionFlags& f) {
  std::string names;
  for (const std::string& n : framework_names()) names += (names.empty() ? "" : "|") + n;
  app.add_option("--framework", f.framework, "price the plan as this framework runs it: " + names);
  app.add_flag("--compile", f.compile, "torch.compile: elementwise kernels fused (fsdp, torchtitan)");
  app.add_flag("--overlap-grad-reduce", f.overlap_grad_reduce, "overlap DP gradient reduction with backward");
  app.add_flag("--fp32-gradients", f.fp32_gradients, "bf16/fp16: accumulate and DP-reduce gradients in fp32");
  app.add_option("--cp-comm", f.cp_comm, "context parallelism's attention: p2p (ring, default) | all-gather | a2a (Ulysses)");
  app.add_option("--moe-imbalance", f.moe_imbalance, "MoE: the busiest expert's tokens over the mean (1: forced balance; default: a trained router's, measured)");
  app.add_option("--moe-capacity-factor", f.moe_capacity_factor, "MoE: tokens an expert takes, x the mean (0: dropless)");
  app.add_option("--fp8-recipe", f.fp8_recipe, "FP8 scaling: delayed (default) | current | rowwise | blockwise | mxfp8");
  app.add_flag("--fp8-param-gather", f.fp8_param_gather, "FP8: weights kept and all-gathered in FP8");
  app.add_option("--loss", f.loss, std::string("the loss as the framework runs it: ") + kLossKernelNames);
  app.add_option("--attention-impl", f.attention_impl,
                 std::string("the fused attention kernel whose measured curve prices it: ") + kAttentionImpls);
  app.add_flag("--tp-comm-overlap", f.tp_comm_overlap, "TP collectives overlapped with GEMMs (userbuffers, async TP)");
  app.add_flag("--moe-a2a-overlap", f.moe_a2a_overlap,
               "MoE: a pass's expert all-to-alls beside another micro-batch's compute (Megatron's 1F1B A2A overlap)");
  app.add_option("--calibration", f.calibration,
                 "calibration NAME (calibrations/), PATH, or none (default: the one the cluster file names)");
}

Execution execution_or_fail(const ExecutionFlags& f) {
  Execution e;
  if (!f.framework.empty()) e = value_or_fail(framework_profile(f.framework)).execution;
  if (f.compile) e.kernels = KernelFusion::kFused;
  if (f.overlap_grad_reduce) e.overlap_grad_reduce = true;
  if (f.fp32_gradients) e.fp32_gradients = true;
  if (!f.cp_comm.empty()) {
    const std::optional<CpComm> c = parse_cp_comm(f.cp_comm);
    if (!c) fail("--cp-comm: unknown '" + f.cp_comm + "' (expected p2p|all-gather|a2a)");
    e.cp_comm = *c;
  }
  if (f.moe_imbalance != 0) {
    if (!(f.moe_imbalance >= 1 && f.moe_imbalance <= 1e3)) fail("--moe-imbalance must be between 1 (balanced) and 1000");
    e.moe_imbalance = f.moe_imbalance;
  }
  if (f.moe_capacity_factor != -1) {
    if (!(f.moe_capacity_factor >= 0 && f.moe_capacity_factor <= 1e3)) fail("--moe-capacity-factor must be between 0 (dropless) and 1000");
    e.moe_capacity_factor = f.moe_capacity_factor;
  }
  if (!f.fp8_recipe.empty()) {
    const std::optional<Fp8Recipe> r = parse_fp8_recipe(f.fp8_recipe);
    if (!r) fail("--fp8-recipe: unknown '" + f.fp8_recipe + "' (expected delayed|current|rowwise|blockwise|mxfp8)");
    e.fp8_recipe = *r;
  }
  if (f.fp8_param_gather) e.fp8_param_gather = true;
  if (!f.loss.empty()) {
    const std::optional<LossKernel> k = parse_loss_kernel(f.loss);
    if (!k) fail("--loss: unknown '" + f.loss + "' (expected " + kLossKernelNames + ")");
    e.loss = *k;
  }
  if (!f.attention_impl.empty()) {
    const std::optional<std::string> impl = parse_attention_impl(f.attention_impl);
    if (!impl) fail("--attention-impl: unknown '" + f.attention_impl + "' (expected " + kAttentionImpls + ")");
    e.attention_impl = *impl;
  }
  if (f.tp_comm_overlap) e.tp_comm_overlap = true;
  if (f.moe_a2a_overlap) e.moe_a2a_overlap = true;
  return e;
}

std::string describe_execution(const Execution& e) {
  return "framework " + (e.framework.empty() ? std::string("parallax defaults") : e.framework) + ": attention " +
         attention_name(e.attention) + ", kernels " + kernels_name(e.kernels) + ", loss " + loss_kernel_name(e.loss) + ", selective " +
         (e.selective != SelectiveRecompute::kAttentionCore || e.recompute_modules == kCoreAttn
              ? std::string(selective_name(e.selective))
              : recompute_modules_text(e.recompute_modules, "+")) +
         (e.fp32_gradients ? ", fp32 gradients" : "") +
         (e.overlap_grad_reduce ? ", DP reduction overlapped" : "") +
         (e.recompute_fraction < 1 ? ", full recompute on " + std::to_string(std::lround(100 * e.recompute_fraction)) + "% of layers" : "") +
         (e.moe_dispatcher == MoeDispatcher::kDeepEp ? ", DeepEP dispatch" : "") +
         (e.moe_a2a_overlap ? ", expert all-to-alls overlapped across micro-batches" : "");
}

std::string moe_routing_line(const ModelSpec& m, const Plan& p) {
  if (!m.is_moe()) return "";
  const Execution& e = p.execution;
  const bool capped = e.moe_capacity_factor > 0 && e.moe_capacity_factor <= busiest_expert(m, p);
  const bool by_default = !capped && e.moe_imbalance == 0;
  const std::string source = capped ? "capacity factor" : by_default ? "a trained router's, by default" : "moe_imbalance";
  return "MoE routing: busiest expert " + fixed(busiest_expert(m, p), 2) + "x the mean (" + source + ")" +
         (p.ep > 1 ? ", busiest EP rank " + fixed(expert_load(m, p), 2) + "x" : "") +
         (by_default ? "; --moe-imbalance 1 prices forced balance" : "");
}

nlohmann::json moe_routing_json(const ModelSpec& m, const Plan& p) {
  if (!m.is_moe()) return nullptr;
  return {{"busiest_expert", busiest_expert(m, p)}, {"busiest_ep_rank", expert_load(m, p)},
          {"default", p.execution.moe_imbalance == 0}};
}

nlohmann::json attention_json(const ModelSpec& m, const ClusterSpec& c, const Execution& e) {
  if (e.attention != AttentionKernel::kFlash) return nullptr;
  const std::string kernel = e.attention_impl.empty() ? "parallax" : e.attention_impl;
  const AttentionCurve* curve = attention_curve(c.gpu, kernel, m.head_dim);
  return {{"kernel", kernel}, {"measured_curve", curve != nullptr},
          {"curve_head_dim", curve ? nlohmann::json(curve->head_dim) : nlohmann::json(nullptr)},
          {"flash_attention_efficiency", curve ? nlohmann::json(nullptr) : nlohmann::json(c.gpu.flash_attention_efficiency)}};
}

std::string attention_line(const ModelSpec& m, const ClusterSpec& c, const Execution& e) {
  const nlohmann::json j = attention_json(m, c, e);
  if (j.is_null()) return "";
  const std::string head = "attention kernel " + j["kernel"].get<std::string>() + ": ";
  if (!j["measured_curve"].get<bool>())
    return head + "no measured curve on " + c.gpu.name + ", priced at its flash_attention_efficiency " +
           fixed(c.gpu.flash_attention_efficiency, 2) + " of peak (an estimate)";
  const int64_t dim = j["curve_head_dim"].get<int64_t>();
  return head + "measured curve, head dimension " + std::to_string(dim) +
         (dim != m.head_dim ? " (the nearest to the model's " + std::to_string(m.head_dim) + ")" : "");
}

std::string unpriced_line(const ModelSpec& m) {
  std::string line;
  for (const std::string& u : m.unpriced) line += (line.empty() ? "model details not priced: " : ", ") + u;
  return line;
}

nlohmann::json framework_json(const Execution& e) {
  if (e.framework.empty()) return nullptr;
  const FrameworkProfile p = value_or_fail(framework_profile(e.framework));
  nlohmann::json settings = nlohmann::json::array();
  for (const FrameworkSetting& s : p.settings) settings.push_back({{"key", s.key}, {"value", s.value}, {"source", s.source}});
  return {{"name", p.name}, {"description", p.description}, {"settings", settings}};
}

void require_format(const std::string& format, const std::vector<std::string>& allowed) {
  std::string list;
  for (const std::string& a : allowed) {
    if (a == format) return;
    list += (list.empty() ? "" : "|") + a;
  }
  fail("--format: unknown '" + format + "' (expected " + list + ")");
}

std::string render_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      out << (c ? "  " : "") << (c == 0 ? cells[c] + pad : pad + cells[c]);
    }
    out << "\n";
  };
  line(header);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out << std::string(total - 2, '-') << "\n";
  for (const auto& row : rows) line(row);
  return out.str();
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
  return out + "\n";
}

}  // namespace parallax::cli
