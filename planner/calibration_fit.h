// Fitting a Calibration (simulator/calibration.h) to measured training runs, and judging it the
// way that counts: leave-one-source-out — fit on every other source, predict this one.
//
// The fit minimises, over the named parameters within their prior ranges, the squared log errors
// log(predicted / measured) of the runs, each weighted by (runs of its source)^-1/2 in the square
// (a source of 89 runs weighs 9.4 single runs, not 89: many rows of one recipe family must not
// outvote every other source, nor one odd row outvote them), residuals beyond 15% down-weighted
// (Huber), plus a weak pull of each parameter toward its neutral value, which a parameter no
// training run moves keeps. Levenberg-Marquardt on the parameters scaled to [0, 1], the Jacobian
// by finite differences over only the runs a parameter can move.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "program/plan.h"
#include "simulator/calibration.h"
#include "simulator/cluster_spec.h"

namespace parallax {

struct MeasuredRun {
  std::string id, source;
  ModelSpec model;
  ClusterSpec cluster;  // as loaded; the fit replaces its calibration
  Plan plan;
  double measured_step_s = 0;
  std::string not_expressible;  // why the plan cannot be priced (check_plan), or ""
};

// {"runs": [{"id", "source", "model": HF config object or model name/path, "cluster": name or
// path, "plan": plan object or path, "measured_step_s"}]}, or a CSV with the header
// id,source,model,cluster,plan,measured_step_s (model, cluster, plan: names or paths). Errors name
// the run and field; a run whose plan the model cannot take is kept with not_expressible set.
Result<std::vector<MeasuredRun>> read_measured_runs(const std::string& path);
// The JSON form's runs, already parsed; `where` (the file) prefixes every error.
Result<std::vector<MeasuredRun>> measured_runs_from_json(const nlohmann::json& j, const std::string& where);

// The step time of each run under `cal` (NaN where the plan cannot be simulated).
std::vector<double> predict_runs(const std::vector<MeasuredRun>& runs, const Calibration& cal);

struct FitOptions {
  std::vector<bool> use;  // which runs the fit sees (empty: all)
  std::vector<CalParam> fixed;  // held at their neutral values (to see what each parameter does)
  int max_iterations = 40;
  // Per unit of a parameter's prior range, toward its neutral value: 0.01 costs as much as a 1%
  // error on every run of one source, so evidence decides and a parameter no run moves stays put.
  double prior_pull = 0.01;
  // Also fit from the middle of every prior range and keep the lower cost (the cost has more than
  // one basin); off for fits warm-started from a nearby optimum.
  bool middle_start = true;
  std::function<void(const std::string&)> log;  // progress lines, or none
};
struct FitResult {
  Calibration calibration;
  std::vector<std::string> fitted;  // the parameters the runs could move ("name" or "name.class")
  int iterations = 0;
  double cost = 0;
};
FitResult fit_calibration(const std::vector<MeasuredRun>& runs, const FitOptions& o, const Calibration& start = {});

// Per run: predicted uncalibrated, calibrated on all runs, and calibrated without its source.
struct CrossValidation {
  FitResult all;
  std::vector<double> uncalibrated_s, in_sample_s, held_out_s;
  std::vector<std::string> run_classes;
  // Whether the run's measured step lies in the 10-90% band built from the held-out residuals of
  // the other sources' runs of its class.
  std::vector<bool> covered;
  std::vector<std::pair<std::string, FitResult>> by_source;  // the fit without each source
};
CrossValidation cross_validate(const std::vector<MeasuredRun>& runs, const FitOptions& o);

// Bands from held-out log residuals log(predicted / measured): the 10th and 90th percentiles per
// run class with at least 8 runs, and over all runs ("all").
std::vector<PredictionBand> prediction_bands(const std::vector<double>& log_residuals,
                                             const std::vector<std::string>& run_classes);

}  // namespace parallax
