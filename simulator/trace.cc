#include "simulator/trace.h"

#include "simulator/html_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace parallax {

namespace {

const char* colour(SvgClass k) {
  switch (k) {
    case SvgClass::kForward: return "#4e79a7";
    case SvgClass::kBackward: return "#59a14f";
    case SvgClass::kWeight: return "#b6992d";
    case SvgClass::kPipeline: return "#f28e2b";
    case SvgClass::kData: return "#b07aa1";
    case SvgClass::kOther: return "#79706e";
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

std::string pipeline_svg(const TaskGraph& g, const Timeline& tl, const std::string& title,
                        const std::function<SvgTask(TaskId)>& describe) {
  int32_t ranks = 0;
  for (size_t s = 0; s < g.stream_count(); ++s) ranks = std::max(ranks, g.stream_rank(static_cast<StreamId>(s)) + 1);
  const double left = 90, width = 1100, row = 30, top = 40, span = std::max(tl.makespan_s, 1e-12);
  const double height = top + ranks * row + 50;
  const double scale = width / span;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"20\" font-size=\"13\">" << html::escape(title) << "</text>\n";
  for (int32_t r = 0; r < ranks; ++r)
    svg << "<text x=\"4\" y=\"" << top + r * row + 16 << "\">stage " << r << "</text>\n";
  for (size_t i = 0; i < g.task_count(); ++i) {
    const TaskId t = static_cast<TaskId>(i);
    const SvgTask task = describe(t);
    const StreamId s = g.stream(t);
    const bool compute = g.stream_kind(s) == StreamKind::kCompute;
    const double y = top + g.stream_rank(s) * row + (compute ? 0 : 20), h = compute ? 18 : 6;
    const double x = left + tl.start_s[t] * scale, w = std::max(0.3, (tl.finish_s[t] - tl.start_s[t]) * scale);
    svg << "<rect x=\"" << fmt(x) << "\" y=\"" << y << "\" width=\"" << fmt(w) << "\" height=\"" << h
        << "\" fill=\"" << colour(task.kind) << (w > 4 ? "\" stroke=\"white\" stroke-width=\"0.5" : "")
        << "\"><title>" << html::escape(task.name) << "</title></rect>\n";
  }
  const double axis = top + ranks * row + 5, step = tick_step(span);
  svg << "<line x1=\"" << left << "\" y1=\"" << axis << "\" x2=\"" << left + width << "\" y2=\"" << axis
      << "\" stroke=\"black\"/>\n";
  for (double t = 0; t <= span * 1.0001; t += step)
    svg << "<text x=\"" << fmt(left + t * scale) << "\" y=\"" << axis + 15 << "\" text-anchor=\"middle\">"
        << fmt(t * 1e3) << " ms</text>\n";
  const std::pair<const char*, SvgClass> legend[] = {{"F", SvgClass::kForward}, {"B", SvgClass::kBackward},
                                                     {"W", SvgClass::kWeight}, {"PP", SvgClass::kPipeline},
                                                     {"DP", SvgClass::kData}, {"other", SvgClass::kOther}};
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
