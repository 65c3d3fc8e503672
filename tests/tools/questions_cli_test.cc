// The planner's question flags end to end: each bad value is one line naming its flag (exit 2);
// --train-tokens' JSON is the formula applied to each plan's step time; --explain's terms add up.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tool_paths.h"

namespace {

using parallax::testing_support::bin;
using parallax::testing_support::sh;

struct PlannerRun {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

PlannerRun planner(const std::string& args) {
  const std::string stem = testing::TempDir() + "/questions_" + std::to_string(getpid());
  const int code = sh(bin("planner") + " --model " PARALLAX_SOURCE_DIR "/models/13b.json --gpus 64 --quiet " + args + " >" +
                      stem + ".out 2>" + stem + ".err </dev/null");
  return {code, slurp(stem + ".out"), slurp(stem + ".err")};
}

TEST(PlannerQuestions, BadValuesAreOneLineNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--train-tokens 15X", "--train-tokens"},        {"--train-tokens -1T", "--train-tokens"},
      {"--gpu-hour-price 2", "--gpu-hour-price"},      {"--train-tokens 1T --gpu-hour-price 0", "--gpu-hour-price"},
      {"--explain 1", "--explain"},                    {"--explain 2,2", "--explain"},
      {"--explain 1,x", "--explain"},                  {"--explain 1,2 --format csv", "--explain"},
      {"--emit plan --html r.html", "--html"},         {"--html /nonexistent-dir/r.html", "--html"}};
  for (const auto& [args, flag] : cases) {
    const PlannerRun r = planner(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
  }
}

TEST(PlannerQuestions, TrainingCostIsTheFormulaOnEachPlan) {
  const PlannerRun r = planner("--top 3 --format json --train-tokens 15T --gpu-hour-price 2.5");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["train_tokens"].get<double>(), 15e12);
  for (const auto& p : j["plans"]) {
    const double steps = 15e12 / (p["global_batch"].get<double>() * p["seq_len"].get<double>());
    const double days = steps * p["step_time_s"].get<double>() / 86400;
    EXPECT_NEAR(p["training"]["days"].get<double>(), days, 1e-9 * days);
    EXPECT_NEAR(p["training"]["gpu_hours"].get<double>(), days * 24 * 64, 1e-9 * days * 24 * 64);
    EXPECT_NEAR(p["training"]["cost_usd"].get<double>(), days * 24 * 64 * 2.5, 1e-9 * days * 24 * 64 * 2.5);
  }
  const PlannerRun csv = planner("--top 1 --format csv --train-tokens 15T");
  EXPECT_NE(csv.out.find(",days,GPU_hours\n"), std::string::npos) << csv.out;
}

TEST(PlannerQuestions, ExplainTermsAddUpAndNameTheDifference) {
  const PlannerRun r = planner("--top 3 --format json --explain 1,3");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json e = nlohmann::json::parse(r.out)["explain"];
  for (int side : {0, 1}) {
    double sum = 0;
    for (const auto& [term, pair] : e["time_s"].items()) sum += pair[side].get<double>();
    EXPECT_NEAR(sum, e["step_time_s"][side].get<double>(), 1e-6);
  }
  EXPECT_EQ(e["time_decided_by"].get<std::string>().rfind("Plan ", 0), 0u);
  const PlannerRun text = planner("--top 3 --explain 1,3");
  EXPECT_NE(text.out.find("why plan 1 and plan 3 differ"), std::string::npos);
  EXPECT_NE(text.out.find("faster per step than"), std::string::npos);
}

}  // namespace
