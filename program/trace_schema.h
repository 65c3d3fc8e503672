// The trace schema the simulator and both runtimes write and `compare` reads:
// Chrome Trace Event JSON, complete events ("ph": "X") with `ts` and `dur` in microseconds, one
// process (`pid`) per pipeline stage, one thread (`tid`) per stream below. Event names come from
// program/step_program.h, so the two sides name every op alike.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace parallax {

// The streams of a rank; the value is the trace's tid.
enum class StreamKind : uint8_t { kCompute, kTp, kPpSend, kPpRecv, kDp };
inline constexpr StreamKind kAllStreams[] = {StreamKind::kCompute, StreamKind::kTp, StreamKind::kPpSend,
                                             StreamKind::kPpRecv, StreamKind::kDp};
const char* stream_name(StreamKind k);  // "compute", "tp", "pp-send", "pp-recv", "dp"

constexpr double kTraceUnitsPerSecond = 1e6;  // ts and dur are microseconds

// One complete event.
nlohmann::json trace_event(int pid, StreamKind stream, const std::string& name, double start_s, double duration_s);
// The metadata events naming process `pid` ("stage N") and its stream tracks.
void add_track_names(nlohmann::json& events, int pid);
// The whole trace object.
nlohmann::json trace_document(nlohmann::json events, const nlohmann::json& metadata);

}  // namespace parallax
