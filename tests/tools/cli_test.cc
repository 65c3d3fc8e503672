// End-to-end tests of the command-line contracts: exit 0 with results, exit 2 with one line that
// names the file, key or constraint for every kind of bad input.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tool_paths.h"
#include "models/model_spec.h"

namespace {

struct ToolRun {
  int code = -1;
  std::string out, err;
};

using parallax::testing_support::bin;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ToolRun run(const std::string& tool, const std::string& args) {
  // ctest runs tests in parallel processes: name the capture files after this one.
  const std::string stem = testing::TempDir() + "/cli_" + std::to_string(getpid());
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string cmd = bin(tool) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  ToolRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Exit 2, exactly one line on stderr, containing `piece`.
void expect_bad_input(const ToolRun& r, const std::string& piece) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(piece), std::string::npos) << "expected '" << piece << "' in: " << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos);
}

TEST(Planner, DemoPrintsARankedTable) {
  ToolRun r = run("planner", "--model 13b --gpus 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("rank"), std::string::npos);
  EXPECT_NE(r.out.find("configurations considered"), std::string::npos);
  EXPECT_NE(r.out.find("seq_len 4096, global batch 1024"), std::string::npos);  // defaults stated
}

// The README's example is the binary's output (all but the search time).
TEST(Planner, ReadmeExampleIsTheBinarysOutput) {
  const std::string readme = slurp(std::string(PARALLAX_SOURCE_DIR) + "/README.md");
  const size_t start = readme.find("```\nmodel 13b (llama");
  ASSERT_NE(start, std::string::npos);
  const std::string shown = readme.substr(start + 4, readme.find("```", start + 4) - start - 4);
  ToolRun r = run("planner", "--model models/13b.json --gpus 64");
  ASSERT_EQ(r.code, 0) << r.err;
  auto without_time = [](const std::string& text) {
    std::string out, line;
    std::istringstream in(text);
    while (std::getline(in, line)) out += line.substr(0, line.find("; searched in")) + "\n";
    return out;
  };
  EXPECT_EQ(without_time(shown), without_time(r.out)) << "regenerate the README's example";
}

// The README and docs/ link only files the repository has.
TEST(Docs, LinksResolveInTheRepository) {
  const std::string root = PARALLAX_SOURCE_DIR;
  for (const char* doc : {"README.md", "docs/architecture.md", "docs/cli.md", "docs/formats.md", "docs/cost-model.md",
                          "bench/validation/README.md"}) {
    const std::string text = slurp(root + "/" + doc);
    ASSERT_FALSE(text.empty()) << doc;
    const std::string dir = std::filesystem::path(root + "/" + doc).parent_path().string();
    for (size_t at = text.find("]("); at != std::string::npos; at = text.find("](", at + 2)) {
      std::string target = text.substr(at + 2, text.find(')', at) - at - 2);
      target = target.substr(0, target.find('#'));
      if (target.empty() || target.rfind("http", 0) == 0) continue;
      EXPECT_TRUE(std::filesystem::exists(dir + "/" + target)) << doc << " links " << target;
    }
    EXPECT_EQ(text.find("../shared/"), std::string::npos) << doc << " cites a file outside the repository";
  }
}

// The progress line: on a terminal (script(1) gives the planner one) once the search outlasts
// PARALLAX_PROGRESS_AFTER_S, erased before the table; never into a file, never with --quiet.
TEST(Planner, ProgressLineOnlyOnATerminal) {
  const std::string out = testing::TempDir() + "/progress_" + std::to_string(getpid());
  const std::string planner = bin("planner") + " --model 13b --gpus 64 --top 1";
  auto on_terminal = [&](const std::string& flags) {
    const std::string cmd = "PARALLAX_PROGRESS_AFTER_S=0 script -qec \"" + planner + flags + "\" /dev/null > " + out;
    EXPECT_EQ(parallax::testing_support::sh(cmd), 0) << cmd;
    return slurp(out);
  };
  const std::string shown = on_terminal("");
  EXPECT_NE(shown.find("planner: "), std::string::npos) << shown;
  EXPECT_NE(shown.find("\r\033[K"), std::string::npos);
  EXPECT_NE(shown.find("rank  TP"), std::string::npos);
  EXPECT_EQ(on_terminal(" --quiet").find("planner: "), std::string::npos);
  setenv("PARALLAX_PROGRESS_AFTER_S", "0", 1);
  const ToolRun piped = run("planner", "--model 13b --gpus 64 --top 1");
  unsetenv("PARALLAX_PROGRESS_AFTER_S");
  EXPECT_EQ(piped.code, 0);
  EXPECT_TRUE(piped.err.empty()) << piped.err;
}

// Tokens typed as sequences: 4,194,304 sequences of 4,096 tokens is refused at once, the slip named.
TEST(Planner, RefusesTokensTypedAsSequences) {
  expect_bad_input(run("planner", "--model 13b --gpus 64 --global-batch 4194304"),
                   "--global-batch counts sequences: 4194304 x 4096 tokens is over a billion tokens per step "
                   "(tokens typed as sequences? ~4M tokens is 1024 sequences)");
}

TEST(Planner, JsonAndCsv) {
  ToolRun r = run("planner", "--model 13b --gpus 64 --format json --top 5");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plans"].size(), 5u);
  EXPECT_GT(j["configurations_considered"].get<int64_t>(), 0);
  EXPECT_EQ(j["defaults"]["global_batch"], 1024);
  EXPECT_TRUE(j["rejected"].contains("out_of_memory"));
  ToolRun csv = run("planner", "--model 13b --gpus 64 --format csv --top 3");
  ASSERT_EQ(csv.code, 0);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 4);
}

TEST(Planner, EmittedPlanSimulatesToTheSameStepTime) {
  ToolRun plan = run("planner", "--model llama3-8b --gpus 16 --emit plan --rank 2");
  ASSERT_EQ(plan.code, 0) << plan.err;
  const std::string path = temp_file("emitted_plan.json", plan.out);
  ToolRun sim = run("simulate", "--model llama3-8b --plan " + path + " --format json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  ToolRun ranked = run("planner", "--model llama3-8b --gpus 16 --format json --top 2");
  const double planned = nlohmann::json::parse(ranked.out)["plans"][1]["step_time_s"];
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.out)["step_time_s"].get<double>(), planned);
}

TEST(Planner, EmitsFrameworkConfigs) {
  ToolRun m = run("planner", "--model 13b --gpus 64 --emit megatron --top 200 --rank 1");
  // The best plan may use a schedule Megatron lacks; then the error names it.
  if (m.code == 0) EXPECT_NE(m.out.find("--tensor-model-parallel-size"), std::string::npos);
  else expect_bad_input(m, "--emit megatron");
  ToolRun bad = run("planner", "--model 13b --gpus 64 --emit yaml");
  expect_bad_input(bad, "--emit: unknown 'yaml'");
  expect_bad_input(run("planner", "--model 13b --gpus 64 --emit plan --rank 100000"), "--rank 100000 is out of range");
}

// --framework lists only what the framework runs, so --emit of every listed plan succeeds; the
// other framework's exporter is refused; --runtime cpu lists only what `train` executes.
TEST(Planner, FrameworkAndRuntimeRestrictTheSearch) {
  for (const char* fw : {"megatron", "deepspeed"}) {
    ToolRun list = run("planner", std::string("--model 13b --gpus 64 --format json --top 8 --framework ") + fw);
    ASSERT_EQ(list.code, 0) << list.err;
    const nlohmann::json j = nlohmann::json::parse(list.out);
    EXPECT_GT(j["rejected"]["framework_cannot_run"].get<int64_t>(), 0);
    for (int rank = 1; rank <= 8; ++rank) {
      ToolRun e = run("planner", std::string("--model 13b --gpus 64 --top 8 --framework ") + fw + " --emit " + fw +
                                     " --rank " + std::to_string(rank));
      EXPECT_EQ(e.code, 0) << fw << " rank " << rank << ": " << e.err;
    }
  }
  expect_bad_input(run("planner", "--model 13b --gpus 64 --framework torchtitan --emit megatron"),
                   "--emit megatron writes what megatron runs");
  ToolRun cpu = run("planner", "--model gpt2 --gpus 4 --runtime cpu --format json --top 50");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  for (const auto& p : nlohmann::json::parse(cpu.out)["plans"]) EXPECT_FALSE(p["offload"].get<bool>());
  expect_bad_input(run("planner", "--model gpt2 --gpus 4 --runtime tpu"), "--runtime: unknown 'tpu'");
}

// The filters users reach for: fixed degrees and ZeRO stage, schedules, no offload, a memory cap.
TEST(Planner, Filters) {
  ToolRun r = run("planner", "--model 13b --gpus 64 --format json --top 20 --tp 2 --zero 1 --schedules 1f1b,zb-h1 "
                             "--no-offload --max-memory-fraction 0.6");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty());
  for (const auto& p : j["plans"]) {
    EXPECT_EQ(p["tp"], 2);
    EXPECT_EQ(p["zero"], 1);
    EXPECT_FALSE(p["offload"].get<bool>());
    EXPECT_TRUE(p["pp"] == 1 || p["schedule"] == "1f1b" || p["schedule"] == "zb-h1") << p.dump();
    EXPECT_LE(p["peak_memory_bytes"].get<double>(), 0.6 * 79.6 * 1073741824.0);
  }
  expect_bad_input(run("planner", "--model 13b --gpus 64 --schedules 1f1b,pipedream"), "--schedule: unknown 'pipedream'");
  expect_bad_input(run("planner", "--model 13b --gpus 64 --max-memory-fraction 1.5"), "--max-memory-fraction must be in (0, 1]");
  expect_bad_input(run("planner", "--model 13b --gpus 64 --tp 0"), "--tp must be >= 1, got 0");
}

// When nothing fits, json and csv still print their document (empty), and the reason goes to stderr.
TEST(Planner, NoPlanStillPrintsItsDocument) {
  ToolRun j = run("planner", "--model llama3.1-405b --gpus 1 --format json");
  expect_bad_input(j, "no plan of model 'llama3.1-405b' fits 1 GPU(s)");
  EXPECT_TRUE(nlohmann::json::parse(j.out)["plans"].empty());
  ToolRun csv = run("planner", "--model llama3.1-405b --gpus 1 --format csv");
  EXPECT_NE(csv.out.find("rank,"), std::string::npos) << csv.out;
}

// When nothing fits, the line names the real cause: the fixed degrees, the framework, or memory
// with the smallest doubling of the GPU count that would fit.
TEST(Planner, NoPlanNamesTheCause) {
  expect_bad_input(run("planner", "--model 13b --gpus 64 --tp 3"),
                   "no configuration of 64 GPU(s) has --tp 3: tp x cp x pp x dp must equal the GPU count");
  expect_bad_input(run("planner", "--model 13b --gpus 64 --framework deepspeed --precision fp8"),
                   "--framework deepspeed runs none of the 20415 legal plans (framework_cannot_run), e.g. deepspeed "
                   "has no FP8 training setting of its own");
  expect_bad_input(run("planner", "--model llama3.1-405b --gpus 8"), "; the smallest doubling that fits is 32 GPUs (by the estimate)");
}

// The pipeline chart's title names every degree the plan splits by, CP and EP included.
TEST(Simulate, ChartTitleNamesContextParallelism) {
  const std::string svg = testing::TempDir() + "/chart_" + std::to_string(getpid()) + ".svg";
  ToolRun r = run("simulate", "--model llama3-8b --tp 2 --cp 2 --pp 2 --dp 2 --micro-batch 1 --global-batch 16 --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(svg).find("TP 2 CP 2 PP 2 DP 2, 1f1b"), std::string::npos);
}

TEST(Planner, BadInputs) {
  expect_bad_input(run("planner", "--gpus 8"), "--model");
  expect_bad_input(run("planner", "--model nope --gpus 8"), "unknown model 'nope' (not a file; bundled: 13b, ");
  expect_bad_input(run("planner", "--model 13c --gpus 8"), "; closest: 13b)");
  expect_bad_input(run("planner", "--model /nowhere/m.json --gpus 8"), "/nowhere/m.json: cannot open file");
  expect_bad_input(run("planner", "--model " + testing::TempDir() + " --gpus 8"), ": is a directory, not a JSON file");
  expect_bad_input(run("planner", "--model 13b --gpus 0"), "--gpus must be >= 1, got 0");
  expect_bad_input(run("planner", "--model 13b --gpus -8"), "--gpus");
  expect_bad_input(run("planner", "--model 13b --gpus many"), "--gpus");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --format xml"), "--format: unknown 'xml'");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --precision int4"), "--precision: unknown 'int4'");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --loss liger"), "--loss: unknown 'liger'");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --attention-impl fa4"),
                   "--attention-impl: unknown 'fa4' (expected fa2|fa3|cudnn|parallax)");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --seq-len 100000"), "exceeds max_position_embeddings");
  expect_bad_input(run("planner", "--model llama3.1-405b --gpus 1"), "no plan of model 'llama3.1-405b' fits 1 GPU(s)");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --cluster dgx-h10"), "unknown cluster 'dgx-h10'");
  expect_bad_input(run("planner", "--model 13b --gpus 8 --cluster dgx-h10"), "closest: dgx-h100)");
  ToolRun many_threads = run("planner", "--model gpt2 --gpus 8 --threads 100000 --top 1");
  EXPECT_EQ(many_threads.code, 0) << many_threads.err;
  // The default batch adapts to odd GPU counts: 6 GPUs get 1026 sequences, not 1024.
  ToolRun six = run("planner", "--model 13b --gpus 6 --format json --top 1");
  ASSERT_EQ(six.code, 0) << six.err;
  EXPECT_EQ(nlohmann::json::parse(six.out)["global_batch"], 1026);
  EXPECT_NE(six.err.find("warning: default global batch 1026 sequences (not a power of two)"), std::string::npos) << six.err;
  expect_bad_input(run("simulate", "--model 13b --plan x.json --tp 8"), "--tp cannot be combined with --plan");
}

TEST(Planner, BadModelFiles) {
  expect_bad_input(run("planner", "--gpus 8 --model " + temp_file("bad1.json", "{\"model_type\": \"llama\",")),
                   "bad1.json: malformed JSON");
  expect_bad_input(run("planner", "--gpus 8 --model " + temp_file("bad2.json", R"({"model_type":"gpt2","n_embd":768})")),
                   "bad2.json: key 'n_layer': missing required key");
  expect_bad_input(
      run("planner", "--gpus 8 --model " +
                         temp_file("bad3.json", R"({"model_type":"gpt2","n_embd":768,"n_layer":"12","n_head":12,
                                                   "vocab_size":50257,"n_positions":1024})")),
      "bad3.json: key 'n_layer': expected an integer");
  expect_bad_input(
      run("planner", "--gpus 8 --model " +
                         temp_file("bad4.json", R"({"model_type":"gpt2","n_embd":0,"n_layer":12,"n_head":12,
                                                   "vocab_size":50257,"n_positions":1024})")),
      "bad4.json: key 'n_embd': must be >= 1, got 0");
}

TEST(Planner, AbsurdModelIsRefused) {
  expect_bad_input(
      run("planner", "--gpus 8 --model " +
                         temp_file("huge.json", R"({"model_type":"llama","hidden_size":16777216,"intermediate_size":16777216,
                                                   "num_hidden_layers":1000,"num_attention_heads":16,
                                                   "vocab_size":32000,"max_position_embeddings":4096})")),
      "huge.json: key 'model': has about");
}

TEST(Planner, BadClusterFile) {
  expect_bad_input(run("planner", "--model 13b --gpus 8 --cluster " +
                                      temp_file("c.json", R"({"name":"x","gpu":{},"node":{},"network":{},"host":{}})")),
                   "c.json: gpu: key 'name': missing required key");
}

// The MoE routing priced, shown: Mixtral's default busiest expert 1 + √π 0.105 z_8 = 1.264943
// (LayerCost.DefaultRoutingImbalance), one expert per rank at EP 8; --moe-imbalance 1 is balance.
TEST(Simulate, ShowsTheMoeRouting) {
  const std::string plan = "--model mixtral-8x7b --tp 1 --pp 1 --dp 64 --ep 8 --zero 1 --micro-batch 1";
  ToolRun r = run("simulate", plan + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json routing = nlohmann::json::parse(r.out)["moe_routing"];
  EXPECT_NEAR(routing["busiest_expert"].get<double>(), 1.264943, 1e-6);
  EXPECT_NEAR(routing["busiest_ep_rank"].get<double>(), 1.264943, 1e-6);
  EXPECT_TRUE(routing["default"].get<bool>());
  ToolRun table = run("simulate", plan + " --moe-imbalance 1");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("MoE routing: busiest expert 1.00x the mean (moe_imbalance), busiest EP rank 1.00x\n"),
            std::string::npos);
}

// Which measured attention curve priced the plan, or that none did: Megatron's cuDNN kernel has an
// H100 curve at head dimension 128 (Llama 3 8B's); FlashAttention-3 has none on an A100, whose
// flash_attention_efficiency then stands in; Parallax's own kernel is measured only on the H200.
TEST(Simulate, NamesTheAttentionCurve) {
  const std::string plan = "--model llama3-8b --tp 1 --pp 1 --dp 8 --zero 1 --micro-batch 1";
  ToolRun cudnn = run("simulate", plan + " --framework megatron");
  ASSERT_EQ(cudnn.code, 0) << cudnn.err;
  EXPECT_NE(cudnn.out.find("\nattention kernel cudnn: measured curve, head dimension 128\n"), std::string::npos) << cudnn.out;
  ToolRun fa3 = run("simulate", plan + " --cluster dgx-a100 --attention-impl fa3 --format json");
  ASSERT_EQ(fa3.code, 0) << fa3.err;
  const nlohmann::json a = nlohmann::json::parse(fa3.out)["attention_kernel"];
  EXPECT_EQ(a["kernel"], "fa3");
  EXPECT_FALSE(a["measured_curve"].get<bool>());
  EXPECT_TRUE(a["curve_head_dim"].is_null());
  ToolRun fa3_table = run("simulate", plan + " --cluster dgx-a100 --attention-impl fa3");
  EXPECT_NE(fa3_table.out.find("attention kernel fa3: no measured curve on A100 SXM4 80GB, priced at its "
                               "flash_attention_efficiency"),
            std::string::npos)
      << fa3_table.out;
  ToolRun own = run("simulate", plan + " --cluster hgx-h200-measured --attention-impl parallax --format json");
  EXPECT_TRUE(nlohmann::json::parse(own.out)["attention_kernel"]["measured_curve"].get<bool>());
  // Choosing the kernel changes the price: FA2 is slower than cuDNN on an H100.
  ToolRun fa2 = run("simulate", plan + " --framework megatron --attention-impl fa2 --format json");
  ToolRun dnn = run("simulate", plan + " --framework megatron --format json");
  EXPECT_GT(nlohmann::json::parse(fa2.out)["step_time_s"].get<double>(), nlohmann::json::parse(dnn.out)["step_time_s"].get<double>());
}

TEST(Simulate, FlagsAndDefaults) {
  ToolRun r = run("simulate", "--model 13b --tp 8 --pp 2 --dp 4 --micro-batch 1 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["defaults"]["seq_len"], 4096);
  EXPECT_EQ(j["defaults"]["global_batch"], 1024);
  EXPECT_EQ(j["defaults"]["precision"], "bf16");
  EXPECT_TRUE(j["fits_in_memory"].get<bool>());
  ToolRun table = run("simulate", "--model 13b --tp 8 --pp 2 --dp 4 --micro-batch 1");
  ASSERT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("defaults chosen"), std::string::npos);
}

// A framework profile prices the plan as that framework runs it, names its settings with sources,
// and refuses to contradict a plan file that names another.
TEST(Simulate, FrameworkProfiles) {
  const std::string flags = "--model llama3-8b --tp 1 --pp 1 --dp 8 --zero 3 --micro-batch 1 --recompute selective --format json";
  ToolRun plain = run("simulate", flags), titan = run("simulate", flags + " --framework torchtitan");
  ASSERT_EQ(titan.code, 0) << titan.err;
  const nlohmann::json j = nlohmann::json::parse(titan.out);
  EXPECT_EQ(j["framework"]["name"], "torchtitan");
  EXPECT_EQ(j["execution"]["kernels"], "eager");
  EXPECT_FALSE(j["framework"]["settings"][0]["source"].get<std::string>().empty());
  EXPECT_GT(j["step_time_s"].get<double>(), nlohmann::json::parse(plain.out)["step_time_s"].get<double>());
  ToolRun compiled = run("simulate", flags + " --framework torchtitan --compile");
  EXPECT_EQ(nlohmann::json::parse(compiled.out)["execution"]["kernels"], "fused");
  expect_bad_input(run("simulate", flags + " --framework jax"), "unknown framework 'jax'");
  const std::string plan = temp_file("fw.json", R"({"tp": 1, "pp": 1, "dp": 8, "zero": 3, "micro_batch": 1,
      "global_batch": 8, "seq_len": 4096, "schedule": "1f1b", "recompute": "none", "execution": {"framework": "nemo"}})");
  expect_bad_input(run("simulate", "--model llama3-8b --plan " + plan + " --framework torchtitan"),
                   "--framework torchtitan contradicts the plan's execution.framework \"nemo\"");
}

TEST(Simulate, PlanThatDoesNotFitIsReportedNotRefused) {
  ToolRun r = run("simulate", "--model llama2-70b --tp 1 --pp 1 --dp 1 --micro-batch 1 --global-batch 8 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["fits_in_memory"].get<bool>());
  EXPECT_NE(r.err.find("warning: plan does not fit"), std::string::npos);
}

TEST(Simulate, BadInputs) {
  expect_bad_input(run("simulate", "--model 13b --tp 3 --pp 1 --dp 1 --micro-batch 1"),
                   "invalid plan: tp 3 does not divide num_attention_heads 40");
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 1 --dp 1 --micro-batch 1 --schedule pipedream"),
                   "--schedule: unknown 'pipedream'");
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 1 --dp 1"), "--micro-batch is required without --plan");
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 3 --dp 1 --micro-batch 1"),
                   "num_layers 40 is not divisible by pp 3");
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 2 --dp 1 --micro-batch 3 --global-batch 16"),
                   "global_batch 16 is not divisible by micro_batch 3");
  expect_bad_input(run("simulate", "--model 13b --plan " + temp_file("p.json", R"({"tp": 8})")),
                   "p.json: key 'pp': missing required key");
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 1 --dp 1 --micro-batch 1 --zero 5"),
                   "--zero must be 0, 1, 2 or 3, got 5");
  // Absurd sizes are refused before any product can overflow.
  expect_bad_input(run("simulate", "--model 13b --tp 8 --pp 16000000 --dp 16000000 --micro-batch 1"),
                   "invalid plan: tp x cp x pp x dp is above the supported 10^8 GPUs");
  expect_bad_input(run("planner", "--model 13b --gpus 1000000000"), "--gpus 1000000000 is above the supported 10^8");
}

// calibrate --refit fits the GEMM keys again from what a GPU calibration measured: the bundled
// H200 measurement gives back its own grid and curve; a cluster that measured nothing is refused.
TEST(Calibrate, RefitFromMeasuredGemmRates) {
  const ToolRun r = run("calibrate", "--refit hgx-h200-measured");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json c = nlohmann::json::parse(r.out);
  const nlohmann::json bundled = nlohmann::json::parse(slurp(parallax::data_dir() + "/clusters/hgx-h200-measured.json"));
  EXPECT_EQ(c["gpu"]["gemm_grid"], bundled["gpu"]["gemm_grid"]);
  EXPECT_EQ(c["gpu"]["gemm_grid"]["dims"], nlohmann::json::parse("[64, 256, 1024, 4096, 16384]"));
  EXPECT_DOUBLE_EQ(c["gpu"]["gemm_max_efficiency"].get<double>(), bundled["gpu"]["gemm_max_efficiency"].get<double>());
  expect_bad_input(run("calibrate", "--refit hgx-h200"), "gpu.measured: key 'gemm_bf16_m_n_k_tflops'");
}

TEST(Train, BadInputs) {
  const std::string model = std::string(PARALLAX_SOURCE_DIR) + "/tests/data/tiny-gpt.json";
  auto plan = [](const std::string& name, int zero, int dp, const char* precision) {
    return temp_file(name, nlohmann::json{{"tp", 1}, {"pp", 1}, {"dp", dp}, {"zero", zero}, {"micro_batch", 1},
                                          {"global_batch", 4}, {"seq_len", 8}, {"schedule", "1f1b"},
                                          {"recompute", "none"}, {"sequence_parallel", false}, {"precision", precision}}
                                .dump());
  };
  expect_bad_input(run("train", "--model " + model + " --plan " + plan("t1.json", 0, 2, "fp32")),
                   "world size 1 does not equal tp x cp x pp x dp = 2 (start it as mpirun -np 2 train ...)");
  nlohmann::json offload = nlohmann::json::parse(slurp(plan("t2.json", 1, 1, "fp32")));
  offload["offload"] = true;
  expect_bad_input(run("train", "--model " + model + " --plan " + temp_file("t2o.json", offload.dump())),
                   "does not execute offload yet");
  expect_bad_input(run("train", "--model nowhere --plan " + plan("t4.json", 0, 1, "fp32")), "unknown model 'nowhere'");
  // A torchrun-style start without mpirun: the launcher's world and MPI's disagree.
  ToolRun torchrun = run("train", "--model " + model + " --plan " + plan("t6.json", 0, 1, "fp32") + " --steps 1");
  const std::string torchrun_cmd = "env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 " + bin("train");
  const std::string cmd = torchrun_cmd + " --model " + model + " --plan " + plan("t7.json", 0, 1, "fp32") +
                          " --steps 1 >/dev/null 2>" + testing::TempDir() + "/torchrun.err";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(slurp(testing::TempDir() + "/torchrun.err").find("torchrun says the world has 2 ranks but MPI has 1"),
            std::string::npos);
  EXPECT_EQ(torchrun.code, 0);
  // A table run prints a line per step as it ends, then the median it states.
  ToolRun two = run("train", "--model " + model + " --plan " + plan("t9.json", 0, 1, "fp32") + " --steps 2");
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(two.out.find("step 1/2  loss "), 0u) << two.out;
  EXPECT_NE(two.out.find("\nstep 2/2  loss "), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("median step (steps 2..2; step 1 is warm-up)"), std::string::npos) << two.out;
  // The trace states the same measured step as train's report: the median after warm-up.
  const std::string trace = testing::TempDir() + "/median_trace.json";
  ToolRun traced = run("train", "--model " + model + " --plan " + plan("t11.json", 0, 1, "fp32") +
                                    " --steps 3 --format json --trace " + trace);
  ASSERT_EQ(traced.code, 0) << traced.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(trace))["metadata"]["step_time_s"],
            nlohmann::json::parse(traced.out)["step_time_s"]);
  expect_bad_input(run("train", "--model " + model + " --plan " + plan("t10.json", 0, 1, "fp32") + " --data " +
                                    testing::TempDir()),
                   "is a directory, not a training file");
  const std::string fp32 = " --plan " + plan("t8.json", 0, 1, "fp32");
  expect_bad_input(run("train", "--model " + model + fp32 + " --device tpu"), "--device: unknown 'tpu' (expected cpu|cuda)");
  expect_bad_input(run("train", "--model " + model + fp32 + " --emulate-rank 0"),
                   "--emulate-rank, --init fast and --peak-tflops need --device cuda");
  expect_bad_input(run("train", "--model " + model + fp32 + " --device cuda --checkpoint " + testing::TempDir()),
                   "--device cuda does not checkpoint yet");
  expect_bad_input(run("train", "--model " + model + fp32 + " --init random"), "--init: unknown 'random'");
  ToolRun ok = run("train", "--model " + model + " --plan " + plan("t5.json", 0, 1, "fp32") + " --steps 2 --format json");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["losses"].size(), 2u);
}

}  // namespace
