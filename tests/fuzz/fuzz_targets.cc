// libFuzzer targets for the readers of untrusted input: Hugging Face model configs, cluster files,
// plans (read, validated, and when valid priced and simulated), traces (compared), calibration
// files and calibrate's measured runs (read; valid calibrations applied to a cluster). Each is
// built as its own binary by defining PARALLAX_FUZZ_TARGET (tests/fuzz/CMakeLists.txt). Any
// crash, sanitizer report, hang or uncaught exception is a failure; every error must be a value.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "planner/calibration_fit.h"
#include "planner/estimate.h"
#include "planner/simulation.h"
#include "simulator/calibration.h"
#include "simulator/cluster_spec.h"
#include "simulator/trace_compare.h"

namespace {

using namespace parallax;

nlohmann::json parse(const uint8_t* data, size_t size) {
  return nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size), nullptr, false);
}

[[maybe_unused]] void fuzz_model(const nlohmann::json& j) {
  Result<ModelSpec> m = model_from_hf_config(j, "fuzz");
  if (!m.ok()) return;
  (void)total_params(*m);
  (void)layer_flops_per_token(*m, 128);
  (void)layer_activation_bytes(*m, {128, 1, 1, false, Recompute::kNone, AttentionKernel::kMaterialized});
}

[[maybe_unused]] void fuzz_cluster(const nlohmann::json& j) {
  Result<ClusterSpec> c = cluster_from_json(j, "fuzz");
  if (!c.ok()) return;
  static const ModelSpec m = load_model("gpt2").value();
  Plan p;
  p.tp = 2;
  p.seq_len = 128;
  p.global_batch = 4;
  if (check_plan(p, m, c->node.gpus).ok()) (void)estimate_step(m, *c, p);
}

[[maybe_unused]] void fuzz_plan(const nlohmann::json& j) {
  Result<Plan> p = plan_from_json(j, "fuzz");
  if (!p.ok()) return;
  static const ModelSpec m = load_model("gpt2").value();
  static const ClusterSpec c = load_cluster("dgx-h100").value();
  if (!check_plan(*p, m, c.node.gpus).ok()) return;
  (void)estimate_step(m, c, *p);
  // Keep each input fast: simulate only plans of modest size.
  if (p->micro_batches() * p->pp * p->virtual_stages <= 4096) (void)simulate_step(m, c, *p);
}

[[maybe_unused]] void fuzz_trace(const nlohmann::json& j) {
  static const nlohmann::json reference = {
      {"traceEvents", {{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"name", "F mb=0 chunk=0"}, {"ts", 0}, {"dur", 5}}}}};
  Result<Comparison> c = compare_traces(j, reference);
  if (c.ok()) {
    (void)comparison_markdown(*c);
    (void)comparison_html(*c, j, reference);
  }
  (void)compare_traces(reference, j);
}

[[maybe_unused]] void fuzz_calibration(const nlohmann::json& j) {
  Result<Calibration> cal = calibration_from_json(j, "fuzz");
  if (!cal.ok()) return;
  static const ClusterSpec base = load_cluster("dgx-h100").value();
  ClusterSpec c = base;
  apply_calibration(c, *cal);
  (void)calibration_to_json(*cal);
}

[[maybe_unused]] void fuzz_runs(const nlohmann::json& j) { (void)measured_runs_from_json(j, "fuzz"); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = parse(data, size);
  if (j.is_discarded()) return 0;
  PARALLAX_FUZZ_TARGET(j);
  return 0;
}
