// The calibration parameters: each acts in its one place by the amount its unit says, the file
// round-trips and refuses values outside the priors, bands are the residual quantiles, and the fit
// recovers parameters that generated a set of runs.
#include <cmath>

#include <gtest/gtest.h>

#include "planner/calibration_fit.h"
#include "planner/simulation.h"
#include "simulator/compute_cost.h"

namespace parallax {
namespace {

ModelSpec tiny() { return load_model("llama3-8b").value(); }

// One stage, one data rank: the step is its compute ops in a row plus the optimizer, so fixed
// costs per op add up exactly.
Plan one_gpu(int64_t micro_batches) {
  Plan p;
  p.seq_len = 2048;
  p.micro_batch = 1;
  p.global_batch = micro_batches;
  return p;
}

double step_s(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  return simulate_step(m, c, p).value().report.step_time_s;
}

TEST(Calibration, SustainedFractionScalesGemmTime) {
  ClusterSpec c = load_cluster("dgx-h100").value();
  const Gemm g{"fc1", 4096, 14336, 4096};
  const double base = gemm_time_s(c.gpu, Precision::kBf16, g);
  Calibration cal;
  cal.name = "t";
  cal.set(CalParam::kSustainedTensor, 0.8, c.gpu.power_class);
  apply_calibration(c, cal);
  // 0.8 of the rate: 1 / 0.8 = 1.25 x the time.
  EXPECT_NEAR(gemm_time_s(c.gpu, Precision::kBf16, g) / base, 1.25, 1e-12);
  // FP8 takes its own fraction on top: 1 / (0.8 x 0.9).
  const double fp8 = gemm_time_s(c.gpu, Precision::kFp8, g);
  cal.fp8_gemm = 0.9;
  apply_calibration(c, cal);
  EXPECT_NEAR(gemm_time_s(c.gpu, Precision::kFp8, g) / fp8, 1 / 0.9, 1e-12);
  // An empty calibration restores the physics.
  apply_calibration(c, Calibration{});
  EXPECT_DOUBLE_EQ(gemm_time_s(c.gpu, Precision::kBf16, g), base);
}

TEST(Calibration, MicrobatchPassOverheadAndLayerGapAddPerPass) {
  const ModelSpec m = tiny();
  ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan p = one_gpu(4);
  const double base = step_s(m, c, p);
  Calibration cal;
  cal.name = "t";
  cal.microbatch_pass_overhead_us = 500;
  apply_calibration(c, cal);
  // 4 micro-batches x (forward + backward) x 500 us = 4 ms.
  EXPECT_NEAR(step_s(m, c, p) - base, 4 * 2 * 500e-6, 1e-9);
  cal.microbatch_pass_overhead_us = 0;
  cal.set(CalParam::kLayerGap, 10, "megatron-family");
  apply_calibration(c, cal);
  // Parallax's default framework is Megatron-like: 4 x 2 passes x 32 layers x 10 us = 2.56 ms.
  EXPECT_NEAR(step_s(m, c, p) - base, 4 * 2 * 32 * 10e-6, 1e-9);
  cal.layer_gap_us.clear();
  cal.set(CalParam::kLayerGap, 10, "pytorch-family");
  apply_calibration(c, cal);
  EXPECT_NEAR(step_s(m, c, p), base, 1e-12);  // another family's gap
}

// The micro-batch-pass overhead is paid once per micro-batch and pass on a stage, however many
// chunks the stage runs it in (and a plan's microbatch_overhead_us once per micro-batch forward).
// GPT-2 (12 layers) on PP 2 with 8 micro-batches, 1 ms: a pipeline's critical path crosses all m
// micro-batches' passes on one stage and (p - 1) / v of one in its fill and drain, so the step
// grows by (m + (p - 1) / v) x 2 x 1 ms: 18 ms non-interleaved, 17 ms with 2 chunks per stage,
// 16.667 ms with 3 (per chunk-pass it would be (m v + p - 1) x 2 ms).
TEST(Calibration, MicrobatchPassOverheadDoesNotGrowWithChunks) {
  const ModelSpec m = load_model("gpt2").value();
  for (int64_t v : {1, 2, 3}) {
    Plan p;
    p.pp = 2, p.virtual_stages = v, p.schedule = v > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
    p.seq_len = 512, p.micro_batch = 1, p.global_batch = 8;
    ClusterSpec c = load_cluster("dgx-h100").value();
    const double base = step_s(m, c, p);
    Calibration cal;
    cal.name = "t";
    cal.microbatch_pass_overhead_us = 1000;
    apply_calibration(c, cal);
    EXPECT_NEAR(step_s(m, c, p) - base, (8 + 1.0 / static_cast<double>(v)) * 2 * 1e-3, 1e-9) << "v " << v;
    // The plan's own microbatch_overhead_us, on the forward only: half of it.
    apply_calibration(c, Calibration{});
    p.execution.microbatch_overhead_us = 1000;
    EXPECT_NEAR(step_s(m, c, p) - base, (8 + 1.0 / static_cast<double>(v)) * 1e-3, 1e-9) << "v " << v;
  }
}

TEST(Calibration, OverlappedTpCollectivesKeepTheExposedShare) {
  const ModelSpec m = tiny();
  ClusterSpec c = load_cluster("dgx-h100").value();
  // Overlapped TP does not go through NCCL (no protocols): compare on the plain ring's price.
  c.node.nccl_protocols = false;
  Plan p = one_gpu(4);
  p.tp = 8;
  p.sequence_parallel = true;
  const LayerTiming base = layer_timing(m, c, p);
  ASSERT_GT(base.tp_comm_s, 0);
  Calibration cal;
  cal.name = "t";
  cal.set(CalParam::kTpOverlapExposed, 0.25, "megatron-family");
  cal.set(CalParam::kTpOverlapExposed, 0.5, "pytorch-family");
  apply_calibration(c, cal);
  // Without tp_comm_overlap the plan exposes all of it; with it, a quarter: every TP collective
  // (the forward and backward pairs and SP's weight-gradient gathers) is scaled.
  EXPECT_DOUBLE_EQ(layer_timing(m, c, p).tp_comm_s, base.tp_comm_s);
  p.execution.tp_comm_overlap = true;
  const LayerTiming overlapped = layer_timing(m, c, p);
  EXPECT_NEAR(overlapped.tp_comm_s, 0.25 * base.tp_comm_s, 1e-15);
  EXPECT_NEAR(base.forward_s - overlapped.forward_s, 0.75 * base.tp_forward_s, 1e-15);
  // Async TP under torchtitan takes its own family's share.
  p.execution.framework = "torchtitan";
  EXPECT_NEAR(layer_timing(m, c, p).tp_comm_s, 0.5 * base.tp_comm_s, 1e-15);
}

// CalParamDef::key and Calibration::keyed must agree: a keyed parameter has a map of values.
TEST(Calibration, KeyedParametersHoldAMap) {
  Calibration cal;
  for (const CalParamDef& d : calibration_params())
    EXPECT_EQ(d.key != CalKey::kNone, cal.keyed(d.id) != nullptr) << d.name;
}

TEST(Calibration, UnmeasuredClassTakesTheMean) {
  Calibration cal;
  cal.set(CalParam::kSustainedTensor, 0.9, "a");
  cal.set(CalParam::kSustainedTensor, 0.8, "*");
  EXPECT_DOUBLE_EQ(cal.value(CalParam::kSustainedTensor, "a"), 0.9);
  EXPECT_DOUBLE_EQ(cal.value(CalParam::kSustainedTensor, "b"), 0.8);
  EXPECT_DOUBLE_EQ(Calibration{}.value(CalParam::kSustainedTensor, "b"), 1.0);
}

TEST(Calibration, JsonRoundTripAndRefusals) {
  Calibration cal;
  cal.name = "mine";
  cal.source = "test";
  cal.set(CalParam::kSustainedTensor, 0.85, "h100-sxm-700w");
  cal.microbatch_pass_overhead_us = 700;
  cal.bands = {{"all", 40, -0.1, 0.05}};
  const Calibration back = calibration_from_json(calibration_to_json(cal), "c.json").value();
  EXPECT_DOUBLE_EQ(back.value(CalParam::kSustainedTensor, "h100-sxm-700w"), 0.85);
  EXPECT_DOUBLE_EQ(back.microbatch_pass_overhead_us, 700);
  ASSERT_EQ(back.bands.size(), 1u);
  EXPECT_DOUBLE_EQ(back.bands[0].log_p10, -0.1);

  // A keyed parameter given one number (as files before it was keyed) holds it for every family.
  nlohmann::json j = calibration_to_json(cal);
  j["parameters"]["tp_overlap_exposed"]["value"] = 0.3;
  EXPECT_DOUBLE_EQ(calibration_from_json(j, "c.json").value().value(CalParam::kTpOverlapExposed, "pytorch-family"), 0.3);
  j["parameters"]["tp_overlap_exposed"]["value"] = 1.5;
  EXPECT_NE(calibration_from_json(j, "c.json").error().find("tp_overlap_exposed 1.500000 is outside its prior range"),
            std::string::npos);
  j = calibration_to_json(cal);
  j["parameters"]["clock_ghz"] = {{"value", 1.7}};
  EXPECT_EQ(calibration_from_json(j, "c.json").error(), "c.json: parameters: unknown parameter 'clock_ghz'");
  j["parameters"].erase("clock_ghz");
  j["parameters"]["chunk_pass_overhead_us"] = {{"value", 500}};  // renamed: a clear error, not a silent alias
  EXPECT_NE(calibration_from_json(j, "c.json").error().find("now 'microbatch_pass_overhead_us'"), std::string::npos);
  j["parameters"].erase("chunk_pass_overhead_us");
  j["bands"][0]["runs"] = "forty";  // a wrong type is an error, not an exception
  EXPECT_EQ(calibration_from_json(j, "c.json").error(), "c.json: bands: each needs class, runs, log_p10 <= log_p90");
}

TEST(Calibration, MeasuredRunsRefuseWrongTypes) {
  const nlohmann::json run = {{"id", "r"}, {"measured_step_s", 1.0}, {"model", "gpt2"}, {"cluster", "dgx-h100"},
                              {"plan", {{"tp", 1}, {"pp", 1}, {"dp", 8}, {"zero", 0}, {"micro_batch", 1}, {"global_batch", 8},
                                        {"seq_len", 128}, {"schedule", "1f1b"}, {"recompute", "none"},
                                        {"sequence_parallel", false}, {"precision", "bf16"}}}};
  const auto runs = [](const nlohmann::json& r) { return nlohmann::json{{"runs", nlohmann::json::array({r})}}; };
  const Result<std::vector<MeasuredRun>> ok = measured_runs_from_json(runs(run), "r.json");
  ASSERT_TRUE(ok.ok()) << ok.error();
  nlohmann::json bad = run;
  bad["model"] = 3;
  EXPECT_EQ(measured_runs_from_json(runs(bad), "r.json").error(),
            "r.json: runs[0]: key 'model': must be a name, a path or an object");
}

TEST(Calibration, BandIsTheResidualQuantiles) {
  // Residuals log(pred/measured) -0.1 .. 0.08 in steps of 0.02 (10 values): the 10th percentile
  // interpolates 0.9 of the way from -0.1 to -0.08 = -0.082; the 90th from 0.06 to 0.08: 0.062.
  std::vector<double> r;
  for (int i = 0; i < 10; ++i) r.push_back(-0.1 + 0.02 * i);
  const std::vector<PredictionBand> bands = prediction_bands(r, std::vector<std::string>(10, "megatron-family dense"));
  ASSERT_EQ(bands.size(), 2u);  // the class and "all"
  EXPECT_NEAR(bands[0].log_p10, -0.082, 1e-12);
  EXPECT_NEAR(bands[0].log_p90, 0.062, 1e-12);
  Calibration cal;
  cal.bands = bands;
  // A 10 s prediction: measured = predicted / exp(residual): 10 / e^0.062 .. 10 / e^-0.082.
  const StepBand b = step_band(cal, "pytorch-family dense", 10).value();  // falls back to "all"
  EXPECT_EQ(b.run_class, "all");
  EXPECT_NEAR(b.low_s, 10 / std::exp(0.062), 1e-12);
  EXPECT_NEAR(b.high_s, 10 / std::exp(-0.082), 1e-12);
}

TEST(Calibration, FitRecoversTheParametersThatMadeTheRuns) {
  // Runs "measured" on a calibration with a sustained fraction of 0.85 and a chunk-pass overhead
  // of 400 us: the fit, starting from the physics alone, finds both. Two depths (12 and 24 layers)
  // tell the overhead per pass from the gap per layer.
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Calibration truth;
  truth.name = "truth";
  truth.set(CalParam::kSustainedTensor, 0.85, c.gpu.power_class);
  truth.microbatch_pass_overhead_us = 400;
  std::vector<MeasuredRun> runs;
  for (const char* model : {"gpt2", "gpt-1.3b"})
  for (int64_t mbs : {1, 4, 16})
    for (int64_t seq : {512, 1024}) {
      const ModelSpec m = load_model(model).value();
      MeasuredRun r{std::string(model) + std::to_string(mbs) + "-" + std::to_string(seq), "s", m, c, one_gpu(mbs), 0, ""};
      r.plan.seq_len = seq;
      r.plan.micro_batch = 8;
      r.plan.global_batch = 8 * mbs;
      runs.push_back(r);
    }
  const std::vector<double> measured = predict_runs(runs, truth);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].measured_step_s = measured[i];
  FitOptions fo;
  fo.prior_pull = 0;  // exact runs: nothing to shrink toward
  const FitResult fit = fit_calibration(runs, fo);
  EXPECT_NEAR(fit.calibration.value(CalParam::kSustainedTensor, c.gpu.power_class), 0.85, 0.01);
  EXPECT_NEAR(fit.calibration.microbatch_pass_overhead_us, 400, 10);
  EXPECT_NEAR(fit.calibration.value(CalParam::kLayerGap, "megatron-family"), 0, 1);
  for (double p : predict_runs(runs, fit.calibration)) EXPECT_TRUE(std::isfinite(p));
}

// Leave-one-source-out must not learn from the source it predicts. Source "fp8" alone runs FP8,
// made with fp8_gemm_fraction 0.8; held out, the fit on source "bf16" has no FP8 run, so the FP8
// fraction goes back to its neutral 1 (not the 0.8 the fit on every run found, where the held-out
// fit starts), and the FP8 runs are predicted faster than measured.
TEST(Calibration, HeldOutFitForgetsWhatOnlyTheHeldOutSourceTaught) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Calibration truth;
  truth.name = "truth";
  truth.fp8_gemm = 0.8;
  std::vector<MeasuredRun> runs;
  for (const Precision prec : {Precision::kBf16, Precision::kFp8})
    for (int64_t mbs : {1, 4, 16}) {
      MeasuredRun r{precision_name(prec) + std::to_string(mbs), precision_name(prec), load_model("gpt-1.3b").value(), c,
                    one_gpu(mbs), 0, ""};
      r.plan.precision = prec;
      runs.push_back(r);
    }
  const std::vector<double> measured = predict_runs(runs, truth);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].measured_step_s = measured[i];
  FitOptions fo;
  fo.prior_pull = 0;
  const CrossValidation cv = cross_validate(runs, fo);
  EXPECT_NEAR(cv.all.calibration.fp8_gemm, 0.8, 0.01);
  for (const auto& [source, fit] : cv.by_source) {
    if (source == "fp8") {
      EXPECT_EQ(fit.calibration.fp8_gemm, 1.0);
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].source == "fp8") {
      EXPECT_LT(cv.held_out_s[i], 0.99 * measured[i]) << runs[i].id;
    }
  }
}

}  // namespace
}  // namespace parallax
