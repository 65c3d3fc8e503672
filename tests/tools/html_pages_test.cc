// The two HTML pages (`planner --html`, `compare --format html`) opened in a real headless browser
// (Debian's chromium; tools/install-deps.sh installs it): each loads without a console message,
// keeps every chart and table it was written with, and reaches for nothing outside itself.
// Skips when no chromium is installed ($PARALLAX_CHROMIUM names another binary).
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tool_paths.h"

namespace {

using parallax::testing_support::bin;
using parallax::testing_support::sh;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& piece) {
  size_t n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

std::string chromium() {
  if (const char* named = std::getenv("PARALLAX_CHROMIUM")) return named;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (sh(std::string("command -v ") + name + " >/dev/null 2>&1") == 0) return name;
  return "";
}

std::string dir() {
  static const std::string d = testing::TempDir() + "/html_pages_" + std::to_string(getpid());
  sh("mkdir -p " + d);
  return d;
}

struct Loaded {
  std::string dom, log;
};

// The page as the browser's DOM after loading, and its log (console messages are ":CONSOLE" lines).
Loaded load(const std::string& browser, const std::string& page) {
  const std::string dom = page + ".dom", log = page + ".log";
  const int code = sh("timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage" +
                      " --user-data-dir=" + dir() + "/profile --enable-logging=stderr --v=0 --dump-dom file://" + page +
                      " >" + dom + " 2>" + log);
  EXPECT_EQ(code, 0) << slurp(log);
  return {slurp(dom), slurp(log)};
}

// Every svg and table of the file is in the DOM, nothing was logged to the console, and nothing
// is loaded from outside the page.
void expect_intact(const std::string& page, const Loaded& l) {
  const std::string source = slurp(page);
  EXPECT_EQ(count(l.dom, "<svg"), count(source, "<svg"));
  EXPECT_EQ(count(l.dom, "<table"), count(source, "<table"));
  EXPECT_EQ(l.log.find(":CONSOLE"), std::string::npos) << l.log;
  for (const char* outside : {"<script", "<link", " src=", " href="}) EXPECT_EQ(l.dom.find(outside), std::string::npos) << outside;
}

TEST(HtmlPages, PlannerReportLoadsWithItsCharts) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "no chromium (apt-get install chromium, or set PARALLAX_CHROMIUM)";
  const std::string page = dir() + "/report.html";
  ASSERT_EQ(sh(bin("planner") + " --model " PARALLAX_SOURCE_DIR "/models/13b.json --gpus 64 --top 5 --quiet --html " + page +
               " >/dev/null"), 0);
  const Loaded l = load(browser, page);
  for (const char* piece : {"<table class=\"ranked-plans\">", "<svg id=\"scatter\"", "class=\"pareto-frontier\"",
                            "class=\"plan-points\"", "class=\"ranked-point\"", "<svg id=\"timeline\"",
                            "<svg id=\"memory-breakdown\"", "class=\"axis x-axis\"", "class=\"legend\"",
                            "predicted step time (s)", "peak memory per GPU (GiB)"})
    EXPECT_NE(l.dom.find(piece), std::string::npos) << piece;
  EXPECT_EQ(count(l.dom, "class=\"ranked-point\""), 5u);
  expect_intact(page, l);
}

TEST(HtmlPages, CompareReportLoadsWithItsCharts) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "no chromium (apt-get install chromium, or set PARALLAX_CHROMIUM)";
  // A predicted trace, and the same step "measured" 10% slower: compare needs a train trace's source.
  const std::string predicted = dir() + "/predicted.json", measured = dir() + "/measured.json", page = dir() + "/compare.html";
  ASSERT_EQ(sh(bin("simulate") + " --model " PARALLAX_SOURCE_DIR "/models/13b.json --tp 2 --pp 2 --dp 2 --micro-batch 1 " +
               "--global-batch 8 --trace " + predicted + " >/dev/null"), 0);
  nlohmann::json trace = nlohmann::json::parse(slurp(predicted));
  trace["metadata"]["source"] = "parallax train";
  for (auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") e["ts"] = e["ts"].get<double>() * 1.1, e["dur"] = e["dur"].get<double>() * 1.1;
  std::ofstream(measured) << trace.dump();
  ASSERT_EQ(sh(bin("compare") + " --predicted " + predicted + " --measured " + measured + " --format html --out " + page), 0);
  const Loaded l = load(browser, page);
  for (const char* piece : {"<table class=\"summary\">", "<table class=\"kinds\">", "<svg id=\"kind-chart\"",
                            "<svg id=\"timeline-predicted\"", "<svg id=\"timeline-measured\"", "class=\"axis x-axis\"",
                            "class=\"legend\"", "time in the step (ms)", "median op time (ms)"})
    EXPECT_NE(l.dom.find(piece), std::string::npos) << piece;
  EXPECT_EQ(l.dom.find("<pre>"), std::string::npos);
  expect_intact(page, l);
}

}  // namespace
