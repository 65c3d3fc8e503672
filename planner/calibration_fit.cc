#include "planner/calibration_fit.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <Eigen/Dense>

#include "models/json_fields.h"
#include "planner/simulation.h"

namespace parallax {

namespace {

constexpr double kHuberLog = 0.15;   // residuals beyond ~15% count linearly, not squared
const char* kAnyClass = "*";         // a power class or framework family no run measured

template <typename T>
Result<T> with_run(Result<T> r, const std::string& where) {
  if (!r.ok()) return Error{where + ": " + r.error()};
  return r;
}

Result<MeasuredRun> run_from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  MeasuredRun run;
  run.id = f.required_string("id");
  run.source = f.optional_string("source").value_or("user");
  run.measured_step_s = f.required_number("measured_step_s");
  for (const char* key : {"model", "cluster", "plan"})
    if (f.ok() && !f.has(key)) f.fail(key, "is required");
  for (const char* key : {"model", "plan"})
    if (f.ok() && !j.at(key).is_object() && !j.at(key).is_string()) f.fail(key, "must be a name, a path or an object");
  if (!f.ok()) return Error{f.error()};
  const nlohmann::json& mj = j.at("model");
  Result<ModelSpec> m = mj.is_object() ? model_from_hf_config(mj, where + ": model")
                                       : with_run(load_model(mj.get<std::string>()), where + ": model");
  if (!m.ok()) return Error{m.error()};
  run.model = *m;
  if (!j.at("cluster").is_string()) return Error{where + ": cluster: must be a name or path"};
  Result<ClusterSpec> c = with_run(load_cluster(j.at("cluster").get<std::string>()), where + ": cluster");
  if (!c.ok()) return Error{c.error()};
  run.cluster = *c;
  const nlohmann::json& pj = j.at("plan");
  Result<Plan> p = pj.is_object() ? plan_from_json(pj, where + ": plan") : with_run(load_plan(pj.get<std::string>()), where + ": plan");
  if (!p.ok()) return Error{p.error()};
  run.plan = *p;
  if (Status s = check_plan(run.plan, run.model, run.cluster.node.gpus); !s.ok()) run.not_expressible = s.error();
  return run;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  return cells;
}

Result<std::vector<MeasuredRun>> read_csv_runs(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv(line);
  const std::vector<std::string> want = {"id", "source", "model", "cluster", "plan", "measured_step_s"};
  if (header != want) return Error{path + ": the header must be id,source,model,cluster,plan,measured_step_s"};
  std::vector<MeasuredRun> runs;
  for (int row = 2; std::getline(in, line); ++row) {
    if (line.empty()) continue;
    const std::vector<std::string> c = split_csv(line);
    const std::string where = path + ":" + std::to_string(row);
    if (c.size() != want.size()) return Error{where + ": needs 6 cells"};
    char* end = nullptr;
    const double step_s = std::strtod(c[5].c_str(), &end);
    if (end == c[5].c_str() || *end != '\0' || !(step_s > 0))
      return Error{where + ": measured_step_s: '" + c[5] + "' is not a positive number of seconds"};
    Result<MeasuredRun> run = run_from_json(
        {{"id", c[0]}, {"source", c[1]}, {"model", c[2]}, {"cluster", c[3]}, {"plan", c[4]}, {"measured_step_s", step_s}}, where);
    if (!run.ok()) return Error{run.error()};
    runs.push_back(std::move(*run));
  }
  return runs;
}

}  // namespace

Result<std::vector<MeasuredRun>> read_measured_runs(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".csv") {
    if (!std::ifstream(path)) return Error{path + ": cannot open file"};
    return read_csv_runs(path);
  }
  Result<nlohmann::json> j = read_json_file(path);
  if (!j.ok()) return Error{j.error()};
  return measured_runs_from_json(*j, path);
}

Result<std::vector<MeasuredRun>> measured_runs_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("runs") || !j.at("runs").is_array())
    return Error{where + ": runs: must be an array of measured runs"};
  std::vector<MeasuredRun> runs;
  for (size_t i = 0; i < j.at("runs").size(); ++i) {
    Result<MeasuredRun> run = run_from_json(j.at("runs")[i], where + ": runs[" + std::to_string(i) + "]");
    if (!run.ok()) return Error{run.error()};
    runs.push_back(std::move(*run));
  }
  if (runs.empty()) return Error{where + ": runs: is empty"};
  return runs;
}

namespace {

// Runs `f(i)` for the runs with want[i], on every core.
template <typename F>
void for_runs(size_t n, const std::vector<bool>& want, F f) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < n;)
      if (want.empty() || want[i]) f(i);
  };
  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 8u));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

double predict_one(const MeasuredRun& run, const Calibration& cal) {
  if (!run.not_expressible.empty()) return std::nan("");
  ClusterSpec c = run.cluster;
  apply_calibration(c, cal);
  Result<Simulation> sim = simulate_report(run.model, c, run.plan);
  return sim.ok() ? sim->report.step_time_s : std::nan("");
}

std::vector<double> predict_some(const std::vector<MeasuredRun>& runs, const Calibration& cal, const std::vector<bool>& want,
                                 std::vector<double> out) {
  for_runs(runs.size(), want, [&](size_t i) { out[i] = predict_one(runs[i], cal); });
  return out;
}

// One fitted number: a parameter, or of a keyed one (CalParamDef::key) one power class or family.
struct Slot {
  const CalParamDef* def;
  std::string power_class;  // the key: a power class or framework family; "" for one value
  std::string label() const { return power_class.empty() ? def->name : std::string(def->name) + "." + power_class; }
  double value(const Calibration& c) const { return c.value(def->id, power_class); }
  double to_unit(double v) const { return (v - def->lo) / (def->hi - def->lo); }
  double from_unit(double u) const { return def->lo + std::clamp(u, 0.0, 1.0) * (def->hi - def->lo); }
};

// The key a run has for a parameter keyed by `key` ("" for one not keyed).
std::string run_key(const MeasuredRun& r, CalKey key) {
  switch (key) {
    case CalKey::kPowerClass: return r.cluster.gpu.power_class;
    case CalKey::kFamily: return framework_family(r.plan.execution.framework);
    case CalKey::kNone: return "";
  }
  return "";
}

bool touches(const Slot& s, const MeasuredRun& r) {
  if (run_key(r, s.def->key) != s.power_class) return false;
  switch (s.def->id) {
    case CalParam::kFp8Gemm: return r.plan.precision == Precision::kFp8;
    case CalParam::kGroupedGemm: return r.model.is_moe();
    case CalParam::kTpOverlapExposed: return r.plan.execution.tp_comm_overlap && r.plan.tp > 1;
    case CalParam::kEpOverlapExposed: return r.plan.execution.moe_a2a_overlap && r.plan.ep > 1;
    case CalParam::kCollectiveEfficiency: return r.plan.gpus() > 1;
    default: return true;  // the sustained fraction, host costs: every run of the key
  }
}

std::vector<Slot> slots_for(const std::vector<MeasuredRun>& runs, const std::vector<bool>& use,
                            const std::vector<CalParam>& fixed) {
  // One slot per parameter, and per key (in order) for a keyed one, where a used run touches it.
  std::vector<Slot> candidates;
  for (const CalParamDef& d : calibration_params()) {
    if (std::find(fixed.begin(), fixed.end(), d.id) != fixed.end()) continue;
    std::set<std::string> keys;
    for (size_t i = 0; i < runs.size(); ++i)
      if (use[i]) keys.insert(run_key(runs[i], d.key));
    for (const std::string& key : keys) candidates.push_back({&d, key});
  }
  std::vector<Slot> slots;
  for (const Slot& s : candidates) {
    bool any = false;
    for (size_t i = 0; i < runs.size() && !any; ++i) any = use[i] && touches(s, runs[i]);
    if (any) slots.push_back(s);
  }
  return slots;
}

// Weighted, Huber-scaled log residuals of the used runs, then the prior pulls.
struct Objective {
  const std::vector<MeasuredRun>& runs;
  const std::vector<bool>& use;
  const std::vector<Slot>& slots;
  std::vector<double> weight;  // per run: (runs of its source)^-1/4, 0 if unused
  double prior_pull;

  Eigen::VectorXd residuals(const std::vector<double>& pred, const Eigen::VectorXd& u) const {
    Eigen::VectorXd r = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(runs.size() + slots.size()));
    for (size_t i = 0; i < runs.size(); ++i) {
      if (weight[i] == 0) continue;
      const double e = std::log(pred[i] / runs[i].measured_step_s);
      // Huber: the square root of the Huber loss keeps least squares' form.
      const double a = std::abs(e), h = a <= kHuberLog ? a : std::sqrt(kHuberLog * (2 * a - kHuberLog));
      r[static_cast<Eigen::Index>(i)] = weight[i] * (e < 0 ? -h : h);
    }
    for (size_t j = 0; j < slots.size(); ++j)
      r[static_cast<Eigen::Index>(runs.size() + j)] = prior_pull * (u[j] - slots[j].to_unit(slots[j].def->neutral));
    return r;
  }
};

// `start` without what the runs in hand cannot have taught it: a parameter no used run moves goes
// back to neutral, and a class or family none measured is dropped (it then reads "*", the mean of
// the fitted ones). A leave-one-source-out fit starts from the fit on every run, so without this
// a parameter only the held-out source informs would carry that source's value into its own
// prediction.
Calibration without_unfitted(Calibration cal, const std::vector<Slot>& slots) {
  for (const CalParamDef& d : calibration_params()) {
    std::map<std::string, double>* values = cal.keyed(d.id);
    if (!values) {
      bool fitted = false;
      for (const Slot& s : slots) fitted = fitted || s.def->id == d.id;
      if (!fitted) cal.set(d.id, d.neutral);
      continue;
    }
    for (auto it = values->begin(); it != values->end();) {
      bool fitted = false;
      for (const Slot& s : slots) fitted = fitted || (s.def->id == d.id && s.power_class == it->first);
      it = fitted ? std::next(it) : values->erase(it);
    }
  }
  return cal;
}

// The keyed parameters' "*" (a class or family no run measured) is the mean of the fitted keys.
Calibration with_values(Calibration cal, const std::vector<Slot>& slots, const Eigen::VectorXd& u) {
  std::map<CalParam, std::pair<double, int>> keyed;
  for (size_t j = 0; j < slots.size(); ++j) {
    const double v = slots[j].from_unit(u[static_cast<Eigen::Index>(j)]);
    cal.set(slots[j].def->id, v, slots[j].power_class);
    if (!slots[j].power_class.empty()) keyed[slots[j].def->id].first += v, ++keyed[slots[j].def->id].second;
  }
  for (const auto& [p, sum] : keyed) cal.set(p, sum.first / sum.second, kAnyClass);
  return cal;
}

}  // namespace

std::vector<double> predict_runs(const std::vector<MeasuredRun>& runs, const Calibration& cal) {
  return predict_some(runs, cal, {}, std::vector<double>(runs.size(), std::nan("")));
}

namespace {

// Levenberg-Marquardt on the unit-scaled parameters from u (clamped to the prior ranges).
FitResult levenberg_marquardt(const std::vector<MeasuredRun>& runs, const FitOptions& o, const Calibration& start,
                              const std::vector<bool>& use, const std::vector<Slot>& slots, const Objective& obj,
                              Eigen::VectorXd u, std::vector<double> pred) {
  const Eigen::Index p = static_cast<Eigen::Index>(slots.size());
  Calibration cal = with_values(start, slots, u);
  pred = predict_some(runs, cal, use, pred);
  Eigen::VectorXd r = obj.residuals(pred, u);
  double cost = r.squaredNorm(), mu = 1e-2;
  FitResult out;
  for (int it = 0; it < o.max_iterations && p > 0; ++it) {
    out.iterations = it + 1;
    Eigen::MatrixXd jac(r.size(), p);
    for (Eigen::Index j = 0; j < p; ++j) {
      Eigen::VectorXd uj = u;
      const double h = u[j] + 0.02 <= 1 ? 0.02 : -0.02;
      uj[j] += h;
      std::vector<bool> moved(runs.size());
      for (size_t i = 0; i < runs.size(); ++i) moved[i] = use[i] && touches(slots[j], runs[i]);
      const std::vector<double> pj = predict_some(runs, with_values(start, slots, uj), moved, pred);
      jac.col(j) = (obj.residuals(pj, uj) - r) / h;
    }
    const Eigen::MatrixXd a = jac.transpose() * jac;
    const Eigen::VectorXd g = jac.transpose() * r;
    bool improved = false;
    for (int tries = 0; tries < 10 && !improved; ++tries, mu *= 4) {
      Eigen::MatrixXd damped = a;
      damped.diagonal() += mu * (a.diagonal().array() + 1e-6).matrix();
      Eigen::VectorXd un = (u - damped.ldlt().solve(g)).cwiseMax(0.0).cwiseMin(1.0);
      const Calibration cn = with_values(start, slots, un);
      const std::vector<double> pn = predict_some(runs, cn, use, pred);
      const Eigen::VectorXd rn = obj.residuals(pn, un);
      if (rn.squaredNorm() < cost) {
        improved = true;
        const double gain = (cost - rn.squaredNorm()) / cost;
        u = un, cal = cn, pred = pn, r = rn, cost = rn.squaredNorm();
        mu = std::max(1e-4, mu / 8);
        if (o.log) o.log("  iteration " + std::to_string(it + 1) + ": cost " + std::to_string(cost));
        if (gain < 1e-5) it = o.max_iterations;
      }
    }
    if (!improved) break;
  }
  out.calibration = cal;
  out.cost = cost;
  for (const Slot& s : slots) out.fitted.push_back(s.label());
  return out;
}

}  // namespace

FitResult fit_calibration(const std::vector<MeasuredRun>& runs, const FitOptions& o, const Calibration& given) {
  std::vector<bool> use = o.use.empty() ? std::vector<bool>(runs.size(), true) : o.use;
  std::vector<double> pred = predict_some(runs, given, use, std::vector<double>(runs.size(), std::nan("")));
  for (size_t i = 0; i < runs.size(); ++i) use[i] = use[i] && std::isfinite(pred[i]);
  const std::vector<Slot> slots = slots_for(runs, use, o.fixed);
  const Calibration start = without_unfitted(given, slots);
  std::map<std::string, int> per_source;
  for (size_t i = 0; i < runs.size(); ++i)
    if (use[i]) ++per_source[runs[i].source];
  Objective obj{runs, use, slots, std::vector<double>(runs.size(), 0.0), o.prior_pull};
  for (size_t i = 0; i < runs.size(); ++i)
    if (use[i]) obj.weight[i] = std::pow(static_cast<double>(per_source[runs[i].source]), -0.25);

  const Eigen::Index p = static_cast<Eigen::Index>(slots.size());
  Eigen::VectorXd u(p);
  for (Eigen::Index j = 0; j < p; ++j) u[j] = slots[j].to_unit(slots[j].value(start));
  FitResult best = levenberg_marquardt(runs, o, start, use, slots, obj, u, pred);
  // The cost has more than one basin (sustained rates, per-layer gaps and per-pass overheads trade
  // against each other), so a fit from the neutral point also starts from the middle of every
  // prior range, and keeps the lower cost. Both starts are fixed: the fit stays reproducible.
  if (o.middle_start && p > 0) {
    if (o.log) o.log("  from the middle of the prior ranges");
    FitResult other = levenberg_marquardt(runs, o, start, use, slots, obj, Eigen::VectorXd::Constant(p, 0.5), pred);
    if (other.cost < best.cost) best = std::move(other);
  }
  return best;
}

std::vector<PredictionBand> prediction_bands(const std::vector<double>& log_residuals,
                                             const std::vector<std::string>& run_classes) {
  std::map<std::string, std::vector<double>> by;
  for (size_t i = 0; i < log_residuals.size(); ++i) {
    if (!std::isfinite(log_residuals[i])) continue;
    by[run_classes[i]].push_back(log_residuals[i]);
    by["all"].push_back(log_residuals[i]);
  }
  auto quantile = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    const double at = q * static_cast<double>(v.size() - 1);
    const size_t k = static_cast<size_t>(at);
    return k + 1 < v.size() ? v[k] + (at - static_cast<double>(k)) * (v[k + 1] - v[k]) : v[k];
  };
  std::vector<PredictionBand> bands;
  for (const auto& [cls, v] : by)
    if (v.size() >= 8) bands.push_back({cls, static_cast<int64_t>(v.size()), quantile(v, 0.1), quantile(v, 0.9)});
  return bands;
}

CrossValidation cross_validate(const std::vector<MeasuredRun>& runs, const FitOptions& o) {
  CrossValidation cv;
  const size_t n = runs.size();
  cv.uncalibrated_s = predict_runs(runs, Calibration{});
  if (o.log) o.log("fit on all " + std::to_string(n) + " runs");
  cv.all = fit_calibration(runs, o);
  cv.in_sample_s = predict_runs(runs, cv.all.calibration);
  cv.held_out_s.assign(n, std::nan(""));
  std::vector<std::string> sources;
  for (const MeasuredRun& r : runs)
    if (std::find(sources.begin(), sources.end(), r.source) == sources.end()) sources.push_back(r.source);
  for (const std::string& s : sources) {
    FitOptions fo = o;
    fo.max_iterations = std::min(o.max_iterations, 8);  // from the fit on all runs, a few steps away
    fo.middle_start = false;
    fo.use.assign(n, false);
    std::vector<bool> held(n, false);
    for (size_t i = 0; i < n; ++i) (runs[i].source == s ? held : fo.use)[i] = true;
    if (o.log) o.log("fit without " + s);
    FitResult f = fit_calibration(runs, fo, cv.all.calibration);
    cv.held_out_s = predict_some(runs, f.calibration, held, cv.held_out_s);
    cv.by_source.emplace_back(s, std::move(f));
  }
  std::vector<double> res(n);
  for (size_t i = 0; i < n; ++i) {
    cv.run_classes.push_back(run_class(runs[i].plan.execution.framework, runs[i].model.is_moe()));
    res[i] = std::log(cv.held_out_s[i] / runs[i].measured_step_s);
  }
  // Coverage as a user meets it: the band from the other sources' held-out residuals only.
  cv.covered.assign(n, false);
  for (const std::string& s : sources) {
    std::vector<double> others = res;
    for (size_t i = 0; i < n; ++i)
      if (runs[i].source == s) others[i] = std::nan("");
    const std::vector<PredictionBand> bands = prediction_bands(others, cv.run_classes);
    Calibration probe;
    probe.bands = bands;
    for (size_t i = 0; i < n; ++i) {
      const PredictionBand* b = runs[i].source == s ? probe.band(cv.run_classes[i]) : nullptr;
      if (b && std::isfinite(res[i])) cv.covered[i] = res[i] >= b->log_p10 && res[i] <= b->log_p90;
    }
  }
  cv.all.calibration.bands = prediction_bands(res, cv.run_classes);
  return cv;
}

}  // namespace parallax
