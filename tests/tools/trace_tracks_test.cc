// `simulate --trace` writes tracks a trace viewer can draw: on every (stage, stream) track no two
// events overlap (one may end exactly where the next starts) and no zero-length event falls inside
// another, which Perfetto and chrome://tracing would draw as nesting. A receive that arrived
// before it was posted once sat at its arrival time inside the previous, still pending receive of
// the pp-recv track (interleaved, 1F1B and ZB-H1 alike).
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tool_paths.h"

namespace {

using parallax::testing_support::bin;
using parallax::testing_support::sh;

struct Event {
  double start_us, end_us;
  std::string name;
};

// A 24-layer GPT on tp 2 x pp 4 (x dp), 32 micro-batches of one sequence; `execution` overrides
// Megatron-Core's defaults.
nlohmann::json plan(const std::string& schedule, int64_t dp, const nlohmann::json& execution, int64_t zero) {
  return {{"tp", 2}, {"pp", 4}, {"dp", dp}, {"cp", 1}, {"ep", 1}, {"zero", zero}, {"micro_batch", 1},
          {"global_batch", 32 * dp}, {"seq_len", 2048}, {"schedule", schedule},
          {"virtual_stages", schedule == "interleaved" ? 2 : 1}, {"recompute", "none"}, {"sequence_parallel", false},
          {"precision", "bf16"}, {"offload", false}, {"execution", execution}};
}

// Simulates `p` and returns its trace's complete events by (pid, tid) track.
std::map<std::pair<int, int>, std::vector<Event>> traced_tracks(const nlohmann::json& p) {
  const std::string stem = testing::TempDir() + "/trace_tracks_" + std::to_string(getpid());
  std::ofstream(stem + ".plan.json") << p.dump();
  const std::string cmd = bin("simulate") + " --model gpt-1.3b --plan " + stem + ".plan.json --trace " + stem +
                          ".trace.json >/dev/null 2>" + stem + ".err";
  EXPECT_EQ(sh(cmd), 0) << p.dump();
  std::map<std::pair<int, int>, std::vector<Event>> tracks;
  std::ifstream in(stem + ".trace.json");
  if (!in) return tracks;
  const nlohmann::json trace = nlohmann::json::parse(in);
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const double start_us = e["ts"];
    tracks[{e["pid"], e["tid"]}].push_back({start_us, start_us + e["dur"].get<double>(), e["name"]});
  }
  return tracks;
}

// Events on one track, sorted by start then end: each starts no earlier than every earlier one
// ended, and a zero-length one lies strictly inside no other. Times are microseconds computed
// from seconds, so touching events may differ in the last bits: a picosecond of slack.
void expect_drawable(const std::string& what, std::pair<int, int> track, std::vector<Event> events) {
  constexpr double kSlackUs = 1e-6;
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::make_pair(a.start_us, a.end_us) < std::make_pair(b.start_us, b.end_us);
  });
  const std::string where = what + ": stage " + std::to_string(track.first) + " tid " + std::to_string(track.second);
  const Event* latest = nullptr;  // the event that ends last so far
  for (const Event& e : events) {
    if (latest && latest->end_us > e.start_us + kSlackUs) {  // the first overlap of the track says enough
      ADD_FAILURE() << where << ": '" << e.name << "' at " << e.start_us << " overlaps '" << latest->name << "' ending "
                    << latest->end_us;
      break;
    }
    if (!latest || e.end_us > latest->end_us) latest = &e;
  }
  for (const Event& zero : events) {
    if (zero.end_us != zero.start_us) continue;
    for (const Event& e : events)
      if (e.start_us + kSlackUs < zero.start_us && zero.start_us < e.end_us - kSlackUs) {
        ADD_FAILURE() << where << ": zero-length '" << zero.name << "' at " << zero.start_us << " inside '" << e.name
                      << "'";
        return;
      }
  }
}

TEST(SimulateTrace, NoTwoEventsOverlapOnATrack) {
  const nlohmann::json blocking = nlohmann::json::object();
  const nlohmann::json overlapped = {{"overlap_p2p", true}, {"overlap_grad_reduce", true}};
  for (const char* schedule : {"1f1b", "interleaved", "zb-h1"})
    for (int64_t dp : {1, 2})
      for (const nlohmann::json& execution : {blocking, overlapped}) {
        const nlohmann::json p = plan(schedule, dp, execution, dp > 1 ? 1 : 0);
        const auto tracks = traced_tracks(p);
        ASSERT_FALSE(tracks.empty()) << p.dump();
        bool recv_track = false;
        for (const auto& [track, events] : tracks) {
          recv_track |= track.second == 3 && events.size() > 10;  // pp-recv carries a receive per pass
          expect_drawable(p.dump(), track, events);
        }
        EXPECT_TRUE(recv_track) << p.dump();
      }
}

}  // namespace
