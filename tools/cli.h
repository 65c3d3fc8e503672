// Shared plumbing of the command-line tools: parse with CLI11, turn any error into one line on
// stderr and exit code 2, load the three inputs by name or path, and print aligned tables. Only
// tools/ parses command lines or prints.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/model_spec.h"
#include "program/plan.h"
#include "simulator/cluster_spec.h"

namespace parallax::cli {

// Prints "<tool>: error: <message>" and exits with code 2.
[[noreturn]] void fail(const std::string& message);
void set_tool_name(const std::string& name);
void warn(const std::string& message);

// One updating status line on stderr for work that outlasts a second (PARALLAX_PROGRESS_AFTER_S
// changes the second, for tests): silent when stderr is not a terminal or `quiet`, redrawn at
// most ten times a second, erased by clear() or the destructor.
class Progress {
 public:
  Progress(std::string tool, bool quiet);
  ~Progress() { clear(); }
  void show(const std::string& line);
  void clear();

 private:
  std::string tool_;
  bool enabled_ = false, shown_ = false;
  double after_s_ = 1.0;
  std::chrono::steady_clock::time_point start_, last_;
};

// Parses argv; --help prints and exits 0, a bad flag exits 2 with one line.
void parse(CLI::App& app, int argc, char** argv);

template <class T>
T value_or_fail(Result<T> r) {
  if (!r.ok()) fail(r.error());
  return std::move(r).value();
}

ModelSpec load_model_or_fail(const std::string& name_or_path);
// With the calibration `calibration` names (NAME, PATH or "none"), else the one the cluster file
// names, applied.
ClusterSpec load_cluster_or_fail(const std::string& name_or_path, const std::string& calibration = "");

// The 10-90% band of a plan's step time under the cluster's calibration (simulator/calibration.h),
// or none without a calibration with bands.
std::optional<StepBand> step_band_of(const ClusterSpec& c, const ModelSpec& m, const Plan& p, double step_s);
// " (lo-hi)" in seconds with `decimals`, or "" without a band.
std::string band_suffix(const std::optional<StepBand>& b, int decimals);
// {"step_time_s": [lo, hi], "mfu": [lo, hi], "class", "runs", "calibration"}, or null.
nlohmann::json band_json(const ClusterSpec& c, const ModelSpec& m, const Plan& p, double step_s, double mfu);


Precision parse_precision_or_fail(const std::string& text);
Schedule parse_schedule_or_fail(const std::string& text);
Recompute parse_recompute_or_fail(const std::string& text);
void require_format(const std::string& format, const std::vector<std::string>& allowed);

// The execution flags simulate and planner share: --framework NAME (a profile, framework.h),
// --compile (torch.compile: fused kernels), --overlap-grad-reduce, --fp32-gradients.
struct ExecutionFlags {
  std::string framework, cp_comm, fp8_recipe, loss, attention_impl;
  bool compile = false, overlap_grad_reduce = false, fp32_gradients = false, fp8_param_gather = false, tp_comm_overlap = false,
       moe_a2a_overlap = false;
  std::string calibration;  // --calibration: not an execution setting, but every pricing tool takes it
  double moe_imbalance = 0, moe_capacity_factor = -1;  // unset: the profile's
};
void add_execution_flags(CLI::App& app, ExecutionFlags& f);
// The profile's settings (Parallax's defaults without --framework) with the flags given applied.
Execution execution_or_fail(const ExecutionFlags& f);
// One line for tables: "framework torchtitan: kernels eager, selective ops, fp32 gradients".
std::string describe_execution(const Execution& e);
// How an MoE plan's routing is priced: the busiest expert and EP rank over the mean, and whence
// ("" / null for a dense model).
std::string moe_routing_line(const ModelSpec& m, const Plan& p);
nlohmann::json moe_routing_json(const ModelSpec& m, const Plan& p);
// "model details not priced: ..." for a model with any (ModelSpec::unpriced), else "".
std::string unpriced_line(const ModelSpec& m);
// Which measured curve prices fused attention (kernel, the curve's head dimension), or that the
// GPU has none for the kernel and its flash_attention_efficiency stands in ("" / null when the
// plan materializes attention).
std::string attention_line(const ModelSpec& m, const ClusterSpec& c, const Execution& e);
nlohmann::json attention_json(const ModelSpec& m, const ClusterSpec& c, const Execution& e);
// {"name", "description", "settings": [{key, value, source}]} of the plan's profile, or null.
nlohmann::json framework_json(const Execution& e);

// A plain text table: left-aligned first column, right-aligned numbers.
std::string render_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string fixed(double value, int decimals);
std::string csv_line(const std::vector<std::string>& cells);

}  // namespace parallax::cli
