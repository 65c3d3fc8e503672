// The simulator and the CPU runtime execute one StepProgram, so `compare` matches every event of a
// predicted and a measured trace of the same plan: for each plan below, `simulate --trace` and
// `train --trace` give 0 unmatched events on both sides, and each stage's measured ops (less the
// "tp ..." events) are the program's ops in program order. Renaming an event on either side fails
// here.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tool_paths.h"

#include "program/step_program.h"

namespace parallax {
namespace {

using testing_support::bin;
using testing_support::sh;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_matching_traces(const nlohmann::json& plan_json, const std::string& what) {
  const std::string dir = testing::TempDir() + "/match_" + std::to_string(getpid());
  ASSERT_EQ(sh("mkdir -p " + dir), 0);
  const std::string model = std::string(PARALLAX_SOURCE_DIR) + "/tests/data/tiny-gpt.json";
  std::ofstream(dir + "/plan.json") << plan_json.dump();
  const Plan plan = plan_from_json(plan_json, "plan").value();
  const std::string args = " --model " + model + " --plan " + dir + "/plan.json";
  ASSERT_EQ(sh(bin("simulate") + args + " --trace " + dir + "/sim.json > /dev/null"), 0) << what;
  ASSERT_EQ(sh("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(plan.gpus()) + " " + bin("train") +
               args + " --steps 1 --trace " + dir + "/run.json > /dev/null"),
            0)
      << what;
  ASSERT_EQ(sh(bin("compare") + " --predicted " + dir + "/sim.json --measured " + dir + "/run.json --format json > " +
               dir + "/cmp.json"),
            0)
      << what;
  const nlohmann::json c = read_json(dir + "/cmp.json");
  EXPECT_EQ(c["unmatched_predicted"].get<int>(), 0) << what;
  EXPECT_EQ(c["unmatched_measured"].get<int>(), 0) << what;
  EXPECT_GT(c["ops"].size(), 0u) << what;

  // Each stage's measured ops, in start order, are its program's ops in program order.
  const StepProgram program = build_step_program(load_model(model).value(), plan);
  std::map<int, std::vector<std::pair<double, std::string>>> measured;
  const nlohmann::json run = read_json(dir + "/run.json");
  for (const auto& e : run["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("tp ", 0) != 0)
      measured[e["pid"].get<int>()].push_back({e["ts"].get<double>(), e["name"].get<std::string>()});
  for (size_t s = 0; s < program.stages.size(); ++s) {
    std::vector<std::pair<double, std::string>>& ops = measured[static_cast<int>(s)];
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> got, want;
    for (const auto& o : ops) got.push_back(o.second);
    for (const ProgramOp& op : program.stages[s].ops) want.push_back(op_name(op));
    EXPECT_EQ(got, want) << what << " stage " << s;
  }
}

nlohmann::json plan(int tp, int pp, int dp, int zero, const char* schedule = "1f1b", int chunks = 1, bool sp = false) {
  return {{"tp", tp}, {"pp", pp}, {"dp", dp}, {"zero", zero}, {"micro_batch", 1}, {"global_batch", 8},
          {"seq_len", 16}, {"schedule", schedule}, {"virtual_stages", chunks}, {"recompute", "none"},
          {"sequence_parallel", sp}, {"precision", "fp32"}};
}

TEST(TraceMatch, PipelineSchedules) {
  expect_matching_traces(plan(1, 2, 1, 0, "1f1b"), "pp 2 1f1b");
  expect_matching_traces(plan(1, 2, 1, 0, "interleaved", 2), "pp 2 interleaved");
  expect_matching_traces(plan(1, 4, 1, 0, "zb-h1"), "pp 4 zb-h1");
}

TEST(TraceMatch, DataParallelZeroStages) {
  for (int zero = 0; zero <= 3; ++zero) expect_matching_traces(plan(1, 1, 2, zero), "dp 2 zero " + std::to_string(zero));
}

TEST(TraceMatch, TensorParallelWithSequenceParallel) {
  expect_matching_traces(plan(2, 1, 1, 0, "1f1b", 1, true), "tp 2 sp");
}

TEST(TraceMatch, Mixture) {
  nlohmann::json p = plan(2, 2, 2, 1);
  p["execution"] = {{"overlap_grad_reduce", true}};
  expect_matching_traces(p, "tp 2 pp 2 dp 2 zero 1 overlap");
}

}  // namespace
}  // namespace parallax
