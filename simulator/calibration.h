// Calibration: the few named physical quantities no public microbenchmark isolates — how much of
// the measured kernel rates a training step sustains, what the host adds per micro-batch, what a
// collective takes from the compute beside it, what a large ring gets of the NICs — fitted to
// measured training runs by `calibrate --runs` (planner/calibration_fit.h) and referenced by a
// cluster file ("calibration": NAME or PATH), or given with --calibration.
//
// Each parameter has a unit, a prior range with its reason, and exactly one place in the cost
// model; its neutral value leaves the physics-only model unchanged, so an uncalibrated cluster
// prices as before. A calibration file also carries its provenance (which runs, their residuals,
// the date) and the prediction bands of runs like the one predicted (leave-one-source-out
// residual quantiles by class), which every prediction shows beside its point estimate.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"

namespace parallax {

struct ClusterSpec;

enum class CalParam {
  kSustainedTensor,   // per GPU power class: one value per class
  kFp8Gemm,
  kGroupedGemm,
  kMicrobatchPassOverhead,
  kTpOverlapExposed,  // per framework family
  kEpOverlapExposed,
  kCollectiveEfficiency,
  kLayerGap,          // per framework family
};

// What a parameter takes one value per: nothing (one value), the GPU's power class, or the
// framework family (framework_family below).
enum class CalKey { kNone, kPowerClass, kFamily };

struct CalParamDef {
  CalParam id;
  const char* name;
  const char* unit;
  CalKey key;
  double neutral, lo, hi;
  const char* place;   // where the cost model uses it
  const char* reason;  // why the prior range is what it is
};
const std::vector<CalParamDef>& calibration_params();
const CalParamDef& calibration_param(CalParam p);

// The 10th and 90th percentiles of log(predicted / measured) of the runs of one class under
// leave-one-source-out: a prediction p of that class is shown with the band
// [p / exp(p90), p / exp(p10)] (a model that predicts 10% fast on such runs widens the band upward).
struct PredictionBand {
  std::string run_class;  // e.g. "megatron-family dense", or "all"
  int64_t runs = 0;
  double log_p10 = 0, log_p90 = 0;
};

struct Calibration {
  std::string name;    // "" = none (the physics-only model)
  std::string source;  // provenance: runs, date, fit
  std::map<std::string, double> sustained_tensor;  // power class -> fraction
  double fp8_gemm = 1, grouped_gemm = 1, microbatch_pass_overhead_us = 0, ep_overlap_exposed = 1, collective_efficiency = 1;
  std::map<std::string, double> tp_overlap_exposed;  // framework family -> exposed share of TP collectives
  std::map<std::string, double> layer_gap_us;        // framework family -> idle microseconds per layer pass
  std::vector<PredictionBand> bands;
  nlohmann::json provenance;  // per-run residuals and the fit's summary, as written

  bool empty() const { return name.empty(); }
  // `key`: the power class or framework family of a keyed parameter (CalParamDef::key); a key no
  // run measured takes the mean of those that were ("*"), and none at all the neutral value.
  double value(CalParam p, const std::string& key = "") const;
  void set(CalParam p, double v, const std::string& key = "");
  // A keyed parameter's values by key; nullptr for one that is not keyed.
  std::map<std::string, double>* keyed(CalParam p);
  const std::map<std::string, double>* keyed(CalParam p) const;
  // The calibrated host time of one forward or backward pass of a chunk under `framework`: its
  // share of the micro-batch-pass overhead (a stage of `chunks` chunks pays it once per micro-batch
  // and pass, not once per chunk) plus, per layer, the layer gap of its family.
  struct HostCost {
    double pass_s = 0, layer_s = 0;
    double chunk_s(double layers, int64_t chunks) const { return pass_s / static_cast<double>(chunks) + layers * layer_s; }
  };
  HostCost host_cost(const std::string& framework) const;
  // The band of a run class: that class's, else "all"'s; nullptr without bands.
  const PredictionBand* band(const std::string& run_class) const;
};

Result<Calibration> calibration_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json calibration_to_json(const Calibration& c);
// `name_or_path`: a path, or NAME found as calibrations/NAME.json in the data directory.
Result<Calibration> load_calibration(const std::string& name_or_path);

// The cluster as the calibration prices it: `calibration` set (the cost model reads the host
// costs, TP overlap share and collective efficiency from it) and the GPU's sustained tensor, FP8
// and grouped-GEMM fractions copied into its GpuSpec (the compute cost reads only that). Replaces
// any calibration the cluster had; an empty one restores the physics-only values.
void apply_calibration(ClusterSpec& c, const Calibration& cal);

// The 10-90% band of a predicted step time `step_s` of a run of class `run_class` under `cal`
// (none without bands): measured steps of such runs fell in it 8 times in 10 when their source
// was held out of the fit.
struct StepBand {
  double low_s = 0, high_s = 0;
  std::string run_class;  // the band's class ("all" where the run's own has too few runs)
  int64_t runs = 0;
};
std::optional<StepBand> step_band(const Calibration& cal, const std::string& run_class, double step_s);

// The framework family: megatron, nemo, megatron-2022 (and Parallax's defaults) -> "megatron-family";
// fsdp, torchtitan, deepspeed -> "pytorch-family".
std::string framework_family(const std::string& framework);
// A run's class for its prediction band: the framework family and dense or MoE.
std::string run_class(const std::string& framework, bool moe);

}  // namespace parallax
