// Every input a fuzzer once crashed on (tests/fuzz/regressions) goes through all the readers
// again: each must return a value (ok or an error), never throw or crash.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "planner/calibration_fit.h"
#include "planner/estimate.h"
#include "simulator/calibration.h"
#include "simulator/trace_compare.h"

namespace parallax {
namespace {

TEST(FuzzRegressions, ReadersReturnValues) {
  const std::filesystem::path dir = std::filesystem::path(PARALLAX_SOURCE_DIR) / "tests/fuzz/regressions";
  const nlohmann::json reference = {
      {"traceEvents", {{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"name", "F mb=0 chunk=0"}, {"ts", 0}, {"dur", 5}}}}};
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    if (j.is_discarded()) continue;
    ++inputs;
    (void)model_from_hf_config(j, "regression");
    (void)cluster_from_json(j, "regression");
    (void)plan_from_json(j, "regression");
    Result<Comparison> c = compare_traces(j, reference);
    if (c.ok()) (void)comparison_html(*c, j, reference);
    (void)compare_traces(reference, j);
    (void)calibration_from_json(j, "regression");
    (void)measured_runs_from_json(j, "regression");
  }
  EXPECT_GT(inputs, 0);
}

}  // namespace
}  // namespace parallax
