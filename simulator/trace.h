// Writers for a simulated step: the Chrome / Perfetto trace of DESIGN.md (one process per rank,
// one track per stream, complete events in microseconds, canonical names so `compare` can match
// them with the runtime's trace) and an SVG pipeline chart a person can read (ranks as rows,
// F / B / W and communication coloured, idle time left blank, a time axis).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"
#include "simulator/engine.h"
#include "simulator/task_graph.h"

namespace parallax {

// Events beyond the graph's tasks, e.g. the TP collectives inside each layer of a compute task.
struct TraceEvent {
  int32_t rank;
  StreamKind stream;
  std::string name;
  double start_s, duration_s;
};
// A sample of a per-rank counter track (e.g. activation bytes held).
struct CounterSample {
  int32_t rank;
  double time_s;
  double value;
};

// Consecutive tasks of one stream with the same label (a backward cut into bucket pieces) become
// one event.
nlohmann::json chrome_trace(const TaskGraph& g, const Timeline& tl, const std::vector<TraceEvent>& extra,
                            const std::vector<CounterSample>& memory, const nlohmann::json& metadata);

std::string pipeline_svg(const TaskGraph& g, const Timeline& tl, const std::string& title);

// Writes `text` to `path`; errors name the file.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace parallax
