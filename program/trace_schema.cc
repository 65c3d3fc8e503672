#include "program/trace_schema.h"

namespace parallax {

const char* stream_name(StreamKind k) {
  switch (k) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kTp: return "tp";
    case StreamKind::kPpSend: return "pp-send";
    case StreamKind::kPpRecv: return "pp-recv";
    case StreamKind::kDp: return "dp";
  }
  return "?";
}

nlohmann::json trace_event(int pid, StreamKind stream, const std::string& name, double start_s, double duration_s) {
  return {{"ph", "X"}, {"pid", pid}, {"tid", static_cast<int>(stream)}, {"name", name},
          {"ts", start_s * kTraceUnitsPerSecond}, {"dur", duration_s * kTraceUnitsPerSecond}};
}

void add_track_names(nlohmann::json& events, int pid) {
  events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", "stage " + std::to_string(pid)}}}});
  events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_sort_index"}, {"args", {{"sort_index", pid}}}});
  for (StreamKind k : kAllStreams)
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", static_cast<int>(k)}, {"name", "thread_name"},
                      {"args", {{"name", stream_name(k)}}}});
}

nlohmann::json trace_document(nlohmann::json events, const nlohmann::json& metadata) {
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"metadata", metadata}};
}

}  // namespace parallax
