// calibrate --runs: fits the named calibration parameters (simulator/calibration.h) to measured
// training runs and writes a calibration file a cluster can reference; with --cross-validate it
// also predicts each source with the parameters fitted on every other source, which is the
// figure that counts, and derives the prediction bands from those held-out errors.
#include "tools/calibrate_runs.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <algorithm>
#include <array>
#include <map>

#include "planner/calibration_fit.h"
#include "planner/simulation.h"
#include "simulator/trace.h"
#include "tools/cli.h"

namespace parallax {
namespace {

struct Stats {
  int n = 0;
  double sum = 0, abs_sum = 0;
  void add(double pct) { ++n, sum += pct, abs_sum += std::abs(pct); }
  std::string mean() const { return n ? cli::fixed(sum / n, 1) + "%" : "—"; }
  std::string mape() const { return n ? cli::fixed(abs_sum / n, 1) + "%" : "—"; }
};

double pct(double predicted, double measured) { return 100 * (predicted / measured - 1); }

std::string date_today() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

// The per-source table (markdown) of uncalibrated, in-sample and held-out errors and coverage.
std::string source_table(const std::vector<MeasuredRun>& runs, const CrossValidation& cv, bool held_out) {
  std::vector<std::string> order;
  std::map<std::string, std::array<Stats, 3>> by;
  std::map<std::string, std::pair<int, int>> covered;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!std::isfinite(cv.uncalibrated_s[i])) continue;
    for (const std::string& s : {runs[i].source, std::string("all")}) {
      if (!by.count(s) && s != "all") order.push_back(s);
      auto& st = by[s];
      st[0].add(pct(cv.uncalibrated_s[i], runs[i].measured_step_s));
      st[1].add(pct(cv.in_sample_s[i], runs[i].measured_step_s));
      if (held_out && std::isfinite(cv.held_out_s[i])) st[2].add(pct(cv.held_out_s[i], runs[i].measured_step_s));
      covered[s].first += held_out && cv.covered[i];
      ++covered[s].second;
    }
  }
  order.push_back("all");
  std::string t = "| source | runs | uncalibrated mean | MAPE | in-sample mean | MAPE |" +
                  std::string(held_out ? " held-out mean | MAPE | in 10-90% band |" : "") + "\n|---|---:|---:|---:|---:|---:|" +
                  (held_out ? "---:|---:|---:|" : "") + "\n";
  for (const std::string& s : order) {
    const auto& st = by[s];
    t += "| " + s + " | " + std::to_string(st[0].n) + " | " + st[0].mean() + " | " + st[0].mape() + " | " + st[1].mean() +
         " | " + st[1].mape() + " |";
    if (held_out)
      t += std::string(" ") + st[2].mean() + " | " + st[2].mape() + " | " + std::to_string(covered[s].first) + "/" +
           std::to_string(covered[s].second) + " |";
    t += "\n";
  }
  return t;
}

std::string parameter_table(const CrossValidation& cv) {
  std::string t = "| parameter | unit | prior | neutral | fitted (all runs) |\n|---|---|---|---:|---:|\n";
  const Calibration& c = cv.all.calibration;
  for (const CalParamDef& d : calibration_params()) {
    const std::string prior = std::string("[") + cli::fixed(d.lo, 2) + ", " + cli::fixed(d.hi, 2) + "]";
    if (const std::map<std::string, double>* values = c.keyed(d.id)) {
      for (const auto& [cls, v] : *values)
        if (cls != "*")
          t += "| " + std::string(d.name) + " (" + cls + ") | " + d.unit + " | " + prior + " | " + cli::fixed(d.neutral, 2) +
               " | " + cli::fixed(v, 3) + " |\n";
      continue;
    }
    const bool fitted = std::find(cv.all.fitted.begin(), cv.all.fitted.end(), d.name) != cv.all.fitted.end();
    t += "| " + std::string(d.name) + " | " + d.unit + " | " + prior + " | " + cli::fixed(d.neutral, 2) + " | " +
         (fitted ? cli::fixed(c.value(d.id), 3) : "not touched") + " |\n";
  }
  return t;
}

std::string run_table(const std::vector<MeasuredRun>& runs, const CrossValidation& cv, bool held_out) {
  std::string t = "| run | source | measured s | uncalibrated | in-sample |" + std::string(held_out ? " held-out |" : "") +
                  "\n|---|---|---:|---:|---:|" + (held_out ? "---:|" : "") + "\n";
  auto cell = [](double p, double m) { return std::isfinite(p) ? cli::fixed(pct(p, m), 1) + "%" : "not expressible"; };
  for (size_t i = 0; i < runs.size(); ++i) {
    const double m = runs[i].measured_step_s;
    t += "| " + runs[i].id + " | " + runs[i].source + " | " + cli::fixed(m, 3) + " | " + cell(cv.uncalibrated_s[i], m) + " | " +
         cell(cv.in_sample_s[i], m) + " |" + (held_out ? std::string(" ") + cell(cv.held_out_s[i], m) + " |" : "") + "\n";
  }
  return t;
}

// Held-out MAPE per source with every parameter fitted, and with each parameter held at its
// neutral value instead: what each parameter does to each source's leave-one-source-out error.
std::string ablation_table(const std::vector<MeasuredRun>& runs, const CrossValidation& cv, const FitOptions& o) {
  auto mape_by_source = [&](const std::vector<double>& pred) {
    std::map<std::string, Stats> by;
    for (size_t i = 0; i < runs.size(); ++i)
      if (std::isfinite(pred[i])) by[runs[i].source].add(pct(pred[i], runs[i].measured_step_s)), by["all"].add(pct(pred[i], runs[i].measured_step_s));
    return by;
  };
  const std::map<std::string, Stats> base = mape_by_source(cv.held_out_s);
  std::vector<std::map<std::string, Stats>> without;
  std::string t = "| source | held-out MAPE |", rule = "|---|---:|";
  for (const CalParamDef& d : calibration_params()) {
    FitOptions fo = o;
    fo.fixed = {d.id};
    if (o.log) o.log(std::string("ablation: without ") + d.name);
    without.push_back(mape_by_source(cross_validate(runs, fo).held_out_s));
    t += std::string(" without ") + d.name + " |";
    rule += "---:|";
  }
  t += "\n" + rule + "\n";
  for (const auto& [source, st] : base) {
    t += "| " + source + " | " + st.mape() + " |";
    for (const auto& w : without) {
      const auto it = w.find(source);
      t += std::string(" ") + (it == w.end() ? std::string("—") : it->second.mape()) + " |";
    }
    t += "\n";
  }
  return t;
}

nlohmann::json provenance(const std::vector<MeasuredRun>& runs, const CrossValidation& cv, const std::vector<std::string>& files,
                          bool held_out) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    nlohmann::json r = {{"id", runs[i].id}, {"source", runs[i].source}, {"measured_step_s", runs[i].measured_step_s}};
    auto put = [&](const char* key, double v) { r[key] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    put("uncalibrated_s", cv.uncalibrated_s[i]);
    put("calibrated_s", cv.in_sample_s[i]);
    if (held_out) put("held_out_s", cv.held_out_s[i]);
    list.push_back(r);
  }
  return {{"files", files}, {"fitted", cv.all.fitted}, {"iterations", cv.all.iterations}, {"runs", list}};
}

}  // namespace

int calibrate_runs(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"Fit the calibration parameters to measured training runs."};
  std::vector<std::string> files;
  std::string out, name = "runs", table, ablate_table;
  bool cross = false, quiet = false, ablate = false;
  app.add_option("--runs", files, "measured runs: JSON {\"runs\": [...]} or CSV id,source,model,cluster,plan,measured_step_s")
      ->required();
  app.add_option("--out", out, "calibration JSON to write (default: standard output)");
  app.add_option("--name", name, "calibration name")->capture_default_str();
  app.add_flag("--cross-validate", cross, "also fit without each source and predict it (leave-one-source-out), and derive bands");
  app.add_option("--table", table, "write the per-source, parameter and per-run tables (markdown)");
  app.add_flag("--ablate", ablate, "with --cross-validate: also each parameter held neutral (slow: one cross-validation each)");
  app.add_flag("--quiet", quiet, "no progress lines on stderr");
  cli::parse(app, argc, argv);

  std::vector<MeasuredRun> runs;
  for (const std::string& f : files) {
    std::vector<MeasuredRun> more = cli::value_or_fail(read_measured_runs(f));
    runs.insert(runs.end(), more.begin(), more.end());
  }
  FitOptions o;
  if (!quiet) o.log = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n"; };
  CrossValidation cv;
  if (cross) {
    cv = cross_validate(runs, o);
  } else {
    cv.uncalibrated_s = predict_runs(runs, Calibration{});
    cv.all = fit_calibration(runs, o);
    cv.in_sample_s = predict_runs(runs, cv.all.calibration);
  }
  Calibration cal = cv.all.calibration;
  cal.name = name;
  cal.source = "calibrate --runs on " + date_today() + ": " + std::to_string(runs.size()) + " measured runs; " +
               (cross ? "bands from leave-one-source-out errors" : "no bands (run with --cross-validate)");
  cal.provenance["fit"] = provenance(runs, cv, files, cross);
  const std::string sources = source_table(runs, cv, cross), params = parameter_table(cv);
  std::cerr << sources << "\n" << params;
  std::string ablation;
  if (cross && ablate) {
    ablation = "\n## Each parameter held neutral (held-out MAPE by source)\n\n" + ablation_table(runs, cv, o);
    std::cerr << ablation;
  }
  if (!table.empty()) {
    if (Status s = write_text_file(table, "## By source\n\n" + sources + "\n## Parameters\n\n" + params + ablation +
                                              "\n## By run\n\n" + run_table(runs, cv, cross));
        !s.ok())
      cli::fail(s.error());
  }
  const std::string text = calibration_to_json(cal).dump(1) + "\n";
  if (out.empty()) std::cout << text;
  else if (Status s = write_text_file(out, text); !s.ok()) cli::fail(s.error());
  return 0;
}

}  // namespace parallax
