#include "simulator/trace_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "models/json_fields.h"

namespace parallax {

namespace {

nlohmann::json metadata_of(const nlohmann::json& trace) {
  return trace.is_object() && trace.contains("metadata") && trace["metadata"].is_object() ? trace["metadata"]
                                                                                           : nlohmann::json::object();
}

struct Event {
  int pid, tid;
  std::string name;
  double start_s, duration_s;
};

Result<std::vector<Event>> complete_events(const nlohmann::json& trace, const char* which) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return Error{std::string(which) + " trace: missing 'traceEvents' array"};
  std::vector<Event> out;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || e["ph"] != "X") continue;
    if (!e.contains("name") || !e["name"].is_string() || !e.contains("ts") || !e["ts"].is_number() ||
        !e.contains("dur") || !e["dur"].is_number() || !e.contains("pid") || !e["pid"].is_number_integer())
      return Error{std::string(which) + " trace: an event lacks name, pid, ts or dur"};
    const bool tid_ok = e.contains("tid") && e["tid"].is_number_integer();
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    const int64_t pid = e["pid"].get<int64_t>();
    if (!std::isfinite(ts) || !std::isfinite(dur) || dur < 0 || pid < 0 || pid > 1 << 24)
      return Error{std::string(which) + " trace: an event has a negative or non-finite time, or a bad pid"};
    out.push_back({static_cast<int>(pid), tid_ok ? static_cast<int>(e["tid"].get<int64_t>() != 0) : 0,
                   e["name"].get<std::string>(), ts * 1e-6, dur * 1e-6});
  }
  if (out.empty()) return Error{std::string(which) + " trace: no complete ('X') events"};
  return out;
}

std::string kind_of(const std::string& name) {
  for (const char* prefix : {"send pp", "recv pp", "optimizer"})
    if (name.rfind(prefix, 0) == 0) return prefix;
  if (name.find(" dp ") != std::string::npos) return "dp";
  if (name.find(" tp ") != std::string::npos) return "tp";
  return name.substr(0, name.find(' '));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Length of [start, end) not covered by the sorted, merged intervals.
double uncovered(double start, double end, const std::vector<std::pair<double, double>>& covered) {
  double left = end - start;
  for (const auto& [a, b] : covered) left -= std::max(0.0, std::min(b, end) - std::max(a, start));
  return std::max(0.0, left);
}

// Communication time no compute hides: each non-compute event minus the compute intervals of its
// process, averaged over processes.
double exposed_communication(const std::vector<Event>& events) {
  std::map<int, std::vector<std::pair<double, double>>> compute;
  for (const Event& e : events)
    if (e.tid == 0) compute[e.pid].push_back({e.start_s, e.start_s + e.duration_s});
  for (auto& [pid, v] : compute) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& iv : v)
      if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
      else merged.push_back(iv);
    v = merged;
  }
  double total = 0;
  for (const Event& e : events)
    if (e.tid != 0) total += uncovered(e.start_s, e.start_s + e.duration_s, compute[e.pid]);
  return compute.empty() ? total : total / static_cast<double>(compute.size());
}

bool is_pass(const std::string& name) {
  return name.size() > 2 && (name[0] == 'F' || name[0] == 'B' || name[0] == 'W') && name[1] == ' ';
}

TraceSummary summarise(const std::vector<Event>& events, const nlohmann::json& trace) {
  TraceSummary s;
  double begin = events.front().start_s, end = 0, pipeline_end = 0;
  std::map<int, double> busy;  // F/B/W seconds per process
  for (const Event& e : events) {
    begin = std::min(begin, e.start_s);
    end = std::max(end, e.start_s + e.duration_s);
    busy[e.pid] += 0;
    if (is_pass(e.name)) busy[e.pid] += e.duration_s, pipeline_end = std::max(pipeline_end, e.start_s + e.duration_s);
  }
  const nlohmann::json meta = metadata_of(trace);
  s.step_time_s = meta.contains("step_time_s") && meta["step_time_s"].is_number() ? meta["step_time_s"].get<double>()
                                                                                   : end - begin;
  // StepReport's definition (docs/cost-model.md "Bubble"): the share of the pipeline phase, from the step's
  // start to the end of the last F/B/W, that a stage does no F/B/W, averaged over stages.
  const double phase = pipeline_end - begin;
  double idle = 0;
  for (const auto& [pid, b] : busy) idle += phase > 0 ? std::max(0.0, phase - b) / phase : 0.0;
  s.bubble_fraction = busy.empty() ? 0 : idle / static_cast<double>(busy.size());
  if (meta.contains("peak_memory_bytes") && meta["peak_memory_bytes"].is_number())
    s.peak_memory_bytes = meta["peak_memory_bytes"].get<double>();
  const nlohmann::json band = meta.value("step_time_band_s", nlohmann::json());
  if (band.is_array() && band.size() == 2 && band[0].is_number() && band[1].is_number())
    s.band_low_s = band[0].get<double>(), s.band_high_s = band[1].get<double>();
  s.exposed_comm_s = exposed_communication(events);
  return s;
}

// Traces of different runs, or given the wrong way round, compare to nonsense: refuse them. A
// trace without Parallax's metadata (another tool's) is compared as given.
Status check_same_run(const nlohmann::json& predicted, const nlohmann::json& measured) {
  const nlohmann::json p = metadata_of(predicted), m = metadata_of(measured);
  auto source = [](const nlohmann::json& meta) { return string_or_empty(meta, "source"); };
  if (source(p) == "parallax train" || source(m) == "parallax simulate")
    return Error{"the predicted trace comes from '" + source(p) + "' and the measured one from '" + source(m) +
                 "': swap --predicted and --measured"};
  if (p.contains("model") && m.contains("model") && p["model"] != m["model"])
    return Error{"the traces are of different models: predicted " + p["model"].dump() + ", measured " + m["model"].dump()};
  if (p.contains("plan") && m.contains("plan") && p["plan"].is_object() && m["plan"].is_object())
    for (const char* key : {"tp", "pp", "dp", "zero", "micro_batch", "global_batch", "seq_len", "schedule",
                            "virtual_stages", "recompute", "sequence_parallel", "precision"})
      if (p["plan"].value(key, nlohmann::json()) != m["plan"].value(key, nlohmann::json()))
        return Error{std::string("the traces are of different plans: ") + key + " " + p["plan"].value(key, nlohmann::json()).dump() +
                     " predicted, " + m["plan"].value(key, nlohmann::json()).dump() + " measured"};
  return Status::Ok();
}

}  // namespace

double relative_error(double predicted, double measured) { return measured != 0 ? predicted / measured - 1 : 0; }

Result<Comparison> compare_traces(const nlohmann::json& predicted, const nlohmann::json& measured) {
  if (Status s = check_same_run(predicted, measured); !s.ok()) return Error{s.error()};
  Result<std::vector<Event>> p = complete_events(predicted, "predicted");
  if (!p.ok()) return Error{p.error()};
  Result<std::vector<Event>> m = complete_events(measured, "measured");
  if (!m.ok()) return Error{m.error()};
  Comparison c;
  c.predicted = summarise(*p, predicted);
  c.measured = summarise(*m, measured);
  // Match the k-th occurrence of (pid, name) in one trace with the k-th in the other.
  std::map<std::pair<int, std::string>, std::vector<double>> pred, meas;
  for (const Event& e : *p) pred[{e.pid, e.name}].push_back(e.duration_s);
  for (const Event& e : *m) meas[{e.pid, e.name}].push_back(e.duration_s);
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_kind;
  for (const auto& [key, pd] : pred) {
    auto it = meas.find(key);
    const size_t both = it == meas.end() ? 0 : std::min(pd.size(), it->second.size());
    c.unmatched_predicted += static_cast<int>(pd.size() - both);
    for (size_t i = 0; i < both; ++i) {
      c.ops.push_back({key.first, key.second, pd[i], it->second[i]});
      by_kind[kind_of(key.second)].first.push_back(pd[i]);
      by_kind[kind_of(key.second)].second.push_back(it->second[i]);
    }
  }
  for (const auto& [key, md] : meas) {
    auto it = pred.find(key);
    c.unmatched_measured += static_cast<int>(md.size() - (it == pred.end() ? 0 : std::min(md.size(), it->second.size())));
  }
  for (const auto& [kind, pm] : by_kind)
    c.kinds.push_back({kind, static_cast<int>(pm.first.size()), median(pm.first), median(pm.second)});
  return c;
}

namespace {
std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * x);
  return b;
}
std::string num(double x, const char* fmt = "%.6g") {
  char b[48];
  std::snprintf(b, sizeof b, fmt, x);
  return b;
}
}  // namespace

std::string TraceSummary::band_verdict(double measured_s) const {
  return measured_s >= band_low_s && measured_s <= band_high_s ? "inside" : "outside";
}

std::string comparison_markdown(const Comparison& c) {
  std::ostringstream o;
  o << "| quantity | predicted | measured | error |\n|---|---:|---:|---:|\n"
    << "| step time (s) | " << num(c.predicted.step_time_s) << " | " << num(c.measured.step_time_s) << " | "
    << pct(relative_error(c.predicted.step_time_s, c.measured.step_time_s)) << " |\n";
  if (c.predicted.has_band())
    o << "| step time 10-90% band (s) | " << num(c.predicted.band_low_s) << " - " << num(c.predicted.band_high_s) << " | "
      << num(c.measured.step_time_s) << " | " << c.predicted.band_verdict(c.measured.step_time_s) << " |\n";
  o << "| bubble | " << pct(c.predicted.bubble_fraction).substr(1) << " | " << pct(c.measured.bubble_fraction).substr(1)
    << " | |\n"
    << "| exposed communication (s) | " << num(c.predicted.exposed_comm_s) << " | " << num(c.measured.exposed_comm_s)
    << " | " << pct(relative_error(c.predicted.exposed_comm_s, c.measured.exposed_comm_s)) << " |\n"
    << "| peak memory (bytes) | " << num(c.predicted.peak_memory_bytes, "%.0f") << " | "
    << num(c.measured.peak_memory_bytes, "%.0f") << " | "
    << pct(relative_error(c.predicted.peak_memory_bytes, c.measured.peak_memory_bytes)) << " |\n\n"
    << "| op kind | matched | predicted median (s) | measured median (s) | error |\n|---|---:|---:|---:|---:|\n";
  for (const KindSummary& k : c.kinds)
    o << "| " << k.kind << " | " << k.count << " | " << num(k.predicted_median_s) << " | " << num(k.measured_median_s)
      << " | " << pct(relative_error(k.predicted_median_s, k.measured_median_s)) << " |\n";
  o << "\n" << c.ops.size() << " events matched by (stage, name); " << c.unmatched_predicted
    << " predicted and " << c.unmatched_measured << " measured events have no counterpart.\n";
  return o.str();
}

nlohmann::json comparison_json(const Comparison& c) {
  auto summary = [](const TraceSummary& s) {
    nlohmann::json j{{"step_time_s", s.step_time_s}, {"bubble_fraction", s.bubble_fraction},
                     {"peak_memory_bytes", s.peak_memory_bytes}, {"exposed_comm_s", s.exposed_comm_s}};
    if (s.has_band()) j["step_time_band_s"] = {s.band_low_s, s.band_high_s};
    return j;
  };
  nlohmann::json kinds = nlohmann::json::array(), ops = nlohmann::json::array();
  for (const KindSummary& k : c.kinds)
    kinds.push_back({{"kind", k.kind}, {"matched", k.count}, {"predicted_median_s", k.predicted_median_s},
                     {"measured_median_s", k.measured_median_s},
                     {"error", relative_error(k.predicted_median_s, k.measured_median_s)}});
  for (const MatchedOp& m : c.ops)
    ops.push_back({{"stage", m.pid}, {"name", m.name}, {"predicted_s", m.predicted_s}, {"measured_s", m.measured_s}});
  return {{"predicted", summary(c.predicted)}, {"measured", summary(c.measured)},
          {"step_time_error", relative_error(c.predicted.step_time_s, c.measured.step_time_s)},
          {"kinds", kinds}, {"ops", ops}, {"unmatched_predicted", c.unmatched_predicted},
          {"unmatched_measured", c.unmatched_measured}};
}

}  // namespace parallax
