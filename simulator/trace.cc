#include "simulator/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace parallax {

namespace {

constexpr double kUs = 1e6;

bool same_label(const TaskLabel& a, const TaskLabel& b) {
  return a.kind == b.kind && a.micro_batch == b.micro_batch && a.chunk == b.chunk && a.index == b.index;
}

nlohmann::json complete(int32_t pid, int tid, const std::string& name, double start_s, double dur_s) {
  return {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", start_s * kUs}, {"dur", dur_s * kUs}};
}

void add_track_names(nlohmann::json& events, int32_t ranks) {
  for (int32_t r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_name"}, {"args", {{"name", "stage " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"}, {"pid", r}, {"name", "process_sort_index"}, {"args", {{"sort_index", r}}}});
    for (StreamKind k : {StreamKind::kCompute, StreamKind::kTp, StreamKind::kPpSend, StreamKind::kPpRecv, StreamKind::kDp})
      events.push_back({{"ph", "M"}, {"pid", r}, {"tid", static_cast<int>(k)}, {"name", "thread_name"},
                        {"args", {{"name", stream_name(k)}}}});
  }
}

}  // namespace

nlohmann::json chrome_trace(const TaskGraph& g, const Timeline& tl, const std::vector<TraceEvent>& extra,
                            const std::vector<CounterSample>& memory, const nlohmann::json& metadata) {
  nlohmann::json events = nlohmann::json::array();
  int32_t ranks = 0;
  for (size_t s = 0; s < g.stream_count(); ++s) ranks = std::max(ranks, g.stream_rank(static_cast<StreamId>(s)) + 1);
  add_track_names(events, ranks);
  std::vector<TaskId> open(g.stream_count(), -1);  // the event being merged on each stream
  std::vector<double> open_end(g.stream_count(), 0);
  auto flush = [&](StreamId s) {
    const TaskId t = open[s];
    if (t < 0) return;
    nlohmann::json e = complete(g.stream_rank(s), static_cast<int>(g.stream_kind(s)), task_name(g.label(t)),
                                tl.start_s[t], open_end[s] - tl.start_s[t]);
    if (g.bytes(t) > 0) e["args"] = {{"bytes", g.bytes(t)}};
    events.push_back(std::move(e));
    open[s] = -1;
  };
  for (size_t i = 0; i < g.task_count(); ++i) {
    const TaskId t = static_cast<TaskId>(i);
    const StreamId s = g.stream(t);
    if (open[s] >= 0 && same_label(g.label(open[s]), g.label(t)) && tl.start_s[t] == open_end[s]) {
      open_end[s] = tl.finish_s[t];
      continue;
    }
    flush(s);
    open[s] = t;
    open_end[s] = tl.finish_s[t];
  }
  for (size_t s = 0; s < g.stream_count(); ++s) flush(static_cast<StreamId>(s));
  for (const TraceEvent& e : extra)
    events.push_back(complete(e.rank, static_cast<int>(e.stream), e.name, e.start_s, e.duration_s));
  for (const CounterSample& c : memory)
    events.push_back({{"ph", "C"}, {"pid", c.rank}, {"name", "activation bytes"}, {"ts", c.time_s * kUs},
                      {"args", {{"bytes", c.value}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"metadata", metadata}};
}

namespace {

const char* colour(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return "#4e79a7";
    case TaskKind::kBackward: return "#59a14f";
    case TaskKind::kWeight: return "#b6992d";
    case TaskKind::kSendForward:
    case TaskKind::kSendBackward: return "#f28e2b";
    case TaskKind::kDpAllReduce:
    case TaskKind::kDpReduceScatter:
    case TaskKind::kDpAllGather: return "#b07aa1";
    case TaskKind::kOptimizer:
    case TaskKind::kOffload: return "#79706e";
  }
  return "#000";
}

// A round tick step giving about 8 ticks over `span`.
double tick_step(double span) {
  const double raw = span / 8, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

}  // namespace

static std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string pipeline_svg(const TaskGraph& g, const Timeline& tl, const std::string& title) {
  int32_t ranks = 0;
  for (size_t s = 0; s < g.stream_count(); ++s) ranks = std::max(ranks, g.stream_rank(static_cast<StreamId>(s)) + 1);
  const double left = 90, width = 1100, row = 30, top = 40, span = std::max(tl.makespan_s, 1e-12);
  const double height = top + ranks * row + 50;
  const double scale = width / span;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"20\" font-size=\"13\">" << xml_escape(title) << "</text>\n";
  for (int32_t r = 0; r < ranks; ++r)
    svg << "<text x=\"4\" y=\"" << top + r * row + 16 << "\">stage " << r << "</text>\n";
  for (size_t i = 0; i < g.task_count(); ++i) {
    const TaskId t = static_cast<TaskId>(i);
    const StreamId s = g.stream(t);
    const bool compute = g.stream_kind(s) == StreamKind::kCompute;
    const double y = top + g.stream_rank(s) * row + (compute ? 0 : 20), h = compute ? 18 : 6;
    const double x = left + tl.start_s[t] * scale, w = std::max(0.3, (tl.finish_s[t] - tl.start_s[t]) * scale);
    svg << "<rect x=\"" << fmt(x) << "\" y=\"" << y << "\" width=\"" << fmt(w) << "\" height=\"" << h
        << "\" fill=\"" << colour(g.label(t).kind) << (w > 4 ? "\" stroke=\"white\" stroke-width=\"0.5" : "")
        << "\"><title>" << task_name(g.label(t)) << "</title></rect>\n";
  }
  const double axis = top + ranks * row + 5, step = tick_step(span);
  svg << "<line x1=\"" << left << "\" y1=\"" << axis << "\" x2=\"" << left + width << "\" y2=\"" << axis
      << "\" stroke=\"black\"/>\n";
  for (double t = 0; t <= span * 1.0001; t += step)
    svg << "<text x=\"" << fmt(left + t * scale) << "\" y=\"" << axis + 15 << "\" text-anchor=\"middle\">"
        << fmt(t * 1e3) << " ms</text>\n";
  const std::pair<const char*, TaskKind> legend[] = {{"F", TaskKind::kForward}, {"B", TaskKind::kBackward},
                                                     {"W", TaskKind::kWeight}, {"PP send", TaskKind::kSendForward},
                                                     {"DP", TaskKind::kDpAllReduce}, {"optimizer", TaskKind::kOptimizer}};
  double lx = left;
  for (const auto& [name, kind] : legend) {
    svg << "<rect x=\"" << lx << "\" y=\"" << axis + 25 << "\" width=\"10\" height=\"10\" fill=\"" << colour(kind)
        << "\"/><text x=\"" << lx + 14 << "\" y=\"" << axis + 34 << "\">" << name << "</text>\n";
    lx += 90;
  }
  svg << "</svg>\n";
  return svg.str();
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return Error{path + ": cannot open for writing"};
  out << text;
  out.close();
  if (!out) return Error{path + ": write failed"};
  return Status::Ok();
}

}  // namespace parallax
