// Every parallel plan trains to the same fp32 losses as one rank: runs `train` under mpirun
// (oversubscribed on this 2-core machine) and compares the per-step losses — relative difference
// <= 1e-5 at step 1 and <= 1e-4 after 5 steps.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

std::string bin() {
  const char* dir = std::getenv("PARALLAX_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/train";
}

struct Layout {
  int tp = 1, pp = 1, dp = 1, micro_batch = 1;
  const char* schedule = "1f1b";
  int chunks = 1;
  int zero = 0;
  const char* recompute = "none";
  bool sp = false;
  int first_stage_layers = 0, last_stage_layers = 0;
  int cp = 1;  // context parallelism (cp_comm all-gather)
  const char* precision = "fp32";  // or fp8: emulated FP8 GEMMs with current scaling
  int ep = 1;                      // expert parallelism (MoE models), over the cp x dp ranks
  const char* cp_comm = "all-gather";  // or p2p: K and V passed around a ring
  bool overlap_grad_reduce = false;
  double recompute_fraction = 1;     // full recompute on this share of the layers
  std::vector<int> pipeline_layout = {};  // layers per model chunk; empty = even
  int ranks() const { return tp * cp * pp * dp; }
};

std::string write_plan(const Layout& l) {
  const std::string path = testing::TempDir() + "/eq_plan_" + std::to_string(getpid()) + ".json";
  nlohmann::json plan = nlohmann::json{{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero},
                                        {"micro_batch", l.micro_batch}, {"global_batch", 8}, {"seq_len", 16},
                                        {"schedule", l.schedule}, {"virtual_stages", l.chunks}, {"recompute", l.recompute},
                                        {"sequence_parallel", l.sp}, {"precision", l.precision},
                                        {"first_stage_layers", l.first_stage_layers},
                                        {"last_stage_layers", l.last_stage_layers}, {"cp", l.cp}, {"ep", l.ep},
                                        {"execution", {{"cp_comm", l.cp_comm}, {"fp8_recipe", "current"}, {"overlap_grad_reduce", l.overlap_grad_reduce},
                                                      {"recompute_fraction", l.recompute_fraction}}}};
  if (!l.pipeline_layout.empty()) plan["pipeline_layout"] = l.pipeline_layout;
  std::ofstream(path) << plan.dump();
  return path;
}

std::vector<double> losses(const std::string& model, const Layout& l) {
  const std::string out = testing::TempDir() + "/eq_out_" + std::to_string(getpid());
  const std::string cmd = "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(l.ranks()) + " " + bin() +
                          " --plan " + write_plan(l) + " --model " + PARALLAX_SOURCE_DIR +
                          "/tests/data/" + model + ".json --steps 5 --format json > " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << text.str();
  const std::string line = text.str();
  const size_t start = line.find('{');
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(line.substr(start))["losses"].get<std::vector<double>>();
}

void expect_same_training(const std::string& model, const Layout& l) {
  static std::map<std::string, std::vector<double>> reference;
  if (!reference.count(model)) reference[model] = losses(model, Layout{1, 1, 1, 8});
  const std::vector<double>& ref = reference[model];
  const std::vector<double> got = losses(model, l);
  const std::string what = model + " tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " dp " +
                           std::to_string(l.dp) + " " + l.schedule + " zero " + std::to_string(l.zero) + " recompute " +
                           l.recompute + (l.sp ? " SP" : "") + " cp " + std::to_string(l.cp) + " " + l.cp_comm + " ep " + std::to_string(l.ep);
  ASSERT_EQ(got.size(), 5u) << what;
  ASSERT_EQ(ref.size(), 5u);
  EXPECT_LE(std::abs(got[0] / ref[0] - 1), 1e-5) << what;
  for (size_t i = 0; i < 5; ++i) EXPECT_LE(std::abs(got[i] / ref[i] - 1), 1e-4) << what << " step " << i + 1;
}

TEST(Equivalence, DataParallel) {
  expect_same_training("tiny-gpt", {1, 1, 2, 4});
  expect_same_training("tiny-llama", {1, 1, 2, 2});  // two micro-batches accumulated per rank
}

TEST(Equivalence, TensorParallel) {
  expect_same_training("tiny-gpt", {2, 1, 1, 4});
  expect_same_training("tiny-gpt", {4, 1, 1, 8});
  expect_same_training("tiny-llama", {2, 1, 1, 2});
}

TEST(Equivalence, PipelineSchedules) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {  // GPT ties embeddings across the stages
    expect_same_training(model, {1, 2, 1, 1, "1f1b"});
    expect_same_training(model, {1, 2, 1, 2, "gpipe"});
    expect_same_training(model, {1, 2, 1, 1, "zb-h1"});
    expect_same_training(model, {1, 2, 1, 1, "interleaved", 2});
  }
  expect_same_training("tiny-gpt", {1, 4, 1, 1, "1f1b"});
}

TEST(Equivalence, ZeroStages) {
  expect_same_training("tiny-gpt", {1, 1, 2, 4, "1f1b", 1, 1});
  expect_same_training("tiny-llama", {1, 1, 2, 2, "1f1b", 1, 2});
  expect_same_training("tiny-gpt", {2, 1, 2, 1, "1f1b", 1, 2});
  expect_same_training("tiny-llama", {1, 2, 2, 1, "1f1b", 1, 1});  // ZeRO-1 with pipelining
  expect_same_training("tiny-gpt", {1, 1, 2, 4, "1f1b", 1, 3});
  expect_same_training("tiny-llama", {2, 1, 2, 1, "1f1b", 1, 3, "full", true});
}

TEST(Equivalence, Recompute) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    expect_same_training(model, {1, 1, 1, 4, "1f1b", 1, 0, "full"});
    expect_same_training(model, {1, 1, 1, 4, "1f1b", 1, 0, "selective"});
  }
  expect_same_training("tiny-gpt", {2, 2, 1, 1, "1f1b", 1, 0, "full"});
  expect_same_training("tiny-llama", {2, 1, 2, 1, "1f1b", 1, 1, "selective"});
  // Full recompute on every other block (fms-fsdp's selective_checkpointing 1/2, Megatron's block
  // method): TP 2 with SP, and PP 2 with ZeRO-3.
  Layout half{2, 1, 1, 4, "1f1b", 1, 0, "full", true};
  half.recompute_fraction = 0.5;
  expect_same_training("tiny-gpt-8l", half);
  Layout third{1, 2, 2, 1, "1f1b", 1, 3, "full"};
  third.recompute_fraction = 1.0 / 3;
  expect_same_training("tiny-gpt-8l", third);
}

TEST(Equivalence, SequenceParallel) {
  expect_same_training("tiny-gpt", {2, 1, 1, 4, "1f1b", 1, 0, "none", true});
  expect_same_training("tiny-llama", {2, 2, 1, 1, "1f1b", 1, 0, "selective", true});
  expect_same_training("tiny-gpt", {2, 1, 2, 1, "1f1b", 1, 1, "full", true});
}

// ZB-H1 as the paper builds it, over 2, 4 and 8 real stages with m = 8, 4 and 1 micro-batches.
TEST(Equivalence, ZeroBubbleH1) {
  for (int pp : {2, 4})
    for (int micro_batch : {1, 2, 8}) expect_same_training("tiny-gpt", {1, pp, 1, micro_batch, "zb-h1"});
  for (int micro_batch : {1, 8}) expect_same_training("tiny-gpt-8l", {1, 8, 1, micro_batch, "zb-h1"});
}

// ZB-H1's B computes input gradients only and its W the parameter gradients from what B kept
// (runtime/transformer.h): with TP + SP (the W GEMMs on the gathered inputs), tied embeddings
// and full recompute, ZeRO-3 (W runs on released weights), context parallelism and MoE experts.
TEST(Equivalence, ZeroBubbleWeightPasses) {
  expect_same_training("tiny-llama", {2, 2, 1, 1, "zb-h1", 1, 0, "none", true});
  expect_same_training("tiny-gpt", {2, 2, 1, 2, "zb-h1", 1, 0, "full", true});
  expect_same_training("tiny-gpt", {1, 1, 2, 2, "zb-h1", 1, 3});
  Layout cp{1, 2, 1, 2, "zb-h1", 1, 0, "selective"};
  cp.cp = 2;
  expect_same_training("tiny-llama", cp);
  Layout moe{1, 2, 2, 1, "zb-h1"};
  moe.ep = 2;
  expect_same_training("tiny-mixtral", moe);
}

// Uneven stages (Megatron's first/last stage layer counts): 8 layers as 1 + 3 + 3 + 1 and 2 + 4 + 2.
TEST(Equivalence, UnevenStages) {
  Layout four{1, 4, 1, 1, "1f1b"};
  four.first_stage_layers = four.last_stage_layers = 1;
  expect_same_training("tiny-gpt-8l", four);
  Layout three{1, 3, 2, 1, "zb-h1", 1, 1};
  three.first_stage_layers = three.last_stage_layers = 2;
  expect_same_training("tiny-gpt-8l", three);
}

// Explicit layouts (Megatron's --pipeline-model-parallel-layout "E|ttt|tttt|tL"): interleaved
// chunks of 0, 3, 4 and 1 layers, the first holding the embedding alone, also with ZeRO-3 over two
// data ranks (its gathers per chunk, an empty one included); and on one chunk per stage, 2 + 6
// with ZeRO-2.
TEST(Equivalence, PipelineLayouts) {
  Layout interleaved{1, 2, 1, 1, "interleaved", 2};
  interleaved.pipeline_layout = {0, 3, 4, 1};
  expect_same_training("tiny-gpt-8l", interleaved);
  Layout sharded{1, 2, 2, 1, "interleaved", 2, 3};
  sharded.pipeline_layout = {0, 3, 4, 1};
  expect_same_training("tiny-gpt-8l", sharded);
  Layout two{1, 2, 2, 1, "1f1b", 1, 2};
  two.pipeline_layout = {2, 6};
  expect_same_training("tiny-gpt-8l", two);
}

// Nemotron: squared-ReLU MLP, partial rotary (half of each head), LayerNorm with GQA.
TEST(Equivalence, Nemotron) {
  expect_same_training("tiny-nemotron", {2, 1, 1, 2, "1f1b", 1, 0, "none", true});
  expect_same_training("tiny-nemotron", {1, 2, 2, 1, "1f1b", 1, 1, "selective"});
}

// Llama with attention_bias and mlp_bias: the Q, K, V and gate/up biases split with their
// rows over TP, the O and down biases are whole on every rank (TP 2 with SP; TP 2 x PP 2).
TEST(Equivalence, Biases) {
  expect_same_training("tiny-llama-bias", {2, 1, 1, 2, "1f1b", 1, 0, "none", true});
  expect_same_training("tiny-llama-bias", {2, 2, 1, 1});
}

TEST(Equivalence, Mixtures) {
  expect_same_training("tiny-gpt", {2, 1, 2, 1});
  expect_same_training("tiny-llama", {2, 1, 2, 2});
  expect_same_training("tiny-gpt", {1, 2, 2, 1, "interleaved", 2});
  expect_same_training("tiny-llama", {2, 2, 2, 1, "zb-h1"});
}

// Context parallelism: each rank keeps chunks r and 2 cp - 1 - r of every sequence, brings every
// rank's K and V to its queries (all-gather, or a ring of point-to-point steps) and sums their
// gradients back; dense gradients reduce over cp x dp.
TEST(Equivalence, ContextParallel) {
  auto cp = [](Layout l, int degree, const char* comm = "all-gather") {
    l.cp = degree, l.cp_comm = comm;
    return l;
  };
  expect_same_training("tiny-llama", cp({1, 1, 1, 8}, 2, "p2p"));
  expect_same_training("tiny-llama", cp({1, 1, 1, 4}, 4, "p2p"));
  expect_same_training("tiny-llama", cp({2, 1, 1, 4, "1f1b", 1, 0, "selective", true}, 2, "p2p"));
  expect_same_training("tiny-llama", cp({1, 1, 1, 8}, 2));
  expect_same_training("tiny-llama", cp({1, 1, 1, 4}, 4));                             // 2 micro-batches
  expect_same_training("tiny-llama", cp({2, 1, 1, 4, "1f1b", 1, 0, "selective", true}, 2));  // TP + SP
  expect_same_training("tiny-llama", cp({1, 2, 1, 2, "1f1b", 1, 0, "full"}, 2));           // PP, full recompute
  expect_same_training("tiny-llama", cp({1, 1, 2, 4, "1f1b", 1, 1}, 2));                   // ZeRO-1 over cp x dp
  expect_same_training("tiny-nemotron", cp({1, 1, 1, 8}, 2));                            // partial rotary
}

// FP8: the GEMM operands rounded to E4M3 / E5M2 with current scaling, amax over the TP and CP
// ranks that share a tensor — so TP and CP train to the FP8 single rank's losses — and, being
// rounded, close to but not equal to fp32's.
TEST(Equivalence, Fp8) {
  Layout one{1, 1, 1, 8};
  one.precision = "fp8";
  const std::vector<double> fp8 = losses("tiny-llama", one), fp32 = losses("tiny-llama", Layout{1, 1, 1, 8});
  ASSERT_EQ(fp8.size(), 5u);
  ASSERT_EQ(fp32.size(), 5u);
  EXPECT_NE(fp8[0], fp32[0]);
  for (size_t i = 0; i < 5; ++i) EXPECT_LE(std::abs(fp8[i] / fp32[i] - 1), 1e-3) << "step " << i + 1;
  Layout split{2, 1, 1, 8, "1f1b", 1, 0, "none", true};
  split.cp = 2, split.precision = "fp8";
  const std::vector<double> got = losses("tiny-llama", split);
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_LE(std::abs(got[i] / fp8[i] - 1), 1e-5) << "tp 2 cp 2 step " << i + 1;
  // ZB-H1's W GEMMs multiply the operands B rounded, as the combined backward does.
  Layout zb{2, 2, 1, 8, "zb-h1", 1, 0, "none", true};  // micro-batches of 8: the same tensors as one rank's
  zb.precision = "fp8";
  const std::vector<double> zb_got = losses("tiny-llama", zb);
  ASSERT_EQ(zb_got.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_LE(std::abs(zb_got[i] / fp8[i] - 1), 1e-5) << "tp 2 pp 2 zb-h1 step " << i + 1;
}

// Expert parallelism (Mixtral-style MoE, top-2 of 4 experts): each rank holds experts / ep of
// every MoE layer, sends each routed copy of a token to its expert's rank and gets the output
// back; the experts' gradients reduce over the ranks holding the same experts.
TEST(Equivalence, ExpertParallel) {
  auto ep = [](Layout l, int degree, int cp = 1) {
    l.ep = degree, l.cp = cp;
    return l;
  };
  expect_same_training("tiny-mixtral", ep({1, 1, 2, 4}, 1));   // MoE without EP: experts are dense weights
  expect_same_training("tiny-mixtral", ep({1, 1, 2, 4}, 2));
  expect_same_training("tiny-mixtral", ep({1, 1, 4, 2}, 4));   // one expert per rank
  expect_same_training("tiny-mixtral", ep({1, 1, 4, 2}, 2));   // experts' gradients over 2 ranks
  expect_same_training("tiny-mixtral", ep({2, 1, 2, 4, "1f1b", 1, 0, "none", true}, 2));  // TP + SP
  expect_same_training("tiny-mixtral", ep({1, 2, 2, 2, "1f1b", 1, 0, "full"}, 2));       // PP, full recompute
  expect_same_training("tiny-mixtral", ep({1, 1, 1, 8}, 2, 2));                          // EP over CP ranks
}

// EP with ZeRO: the dense weights shard over all data ranks, the experts over the ranks holding
// the same experts (or, one such rank, keep whole states); ZeRO-2/3 reduce-scatter (and ZeRO-3
// gather) them around every pass.
TEST(Equivalence, ExpertParallelWithZero) {
  auto ep = [](Layout l, int degree) {
    l.ep = degree;
    return l;
  };
  expect_same_training("tiny-mixtral", ep({1, 1, 4, 2, "1f1b", 1, 1}, 2));  // experts sharded over 2 ranks
  expect_same_training("tiny-mixtral", ep({1, 1, 2, 4, "1f1b", 1, 1}, 2));  // one rank per expert group
  expect_same_training("tiny-mixtral", ep({1, 2, 2, 2, "1f1b", 1, 1}, 2));
  expect_same_training("tiny-mixtral", ep({1, 1, 4, 1, "1f1b", 1, 2}, 2));
  expect_same_training("tiny-mixtral", ep({1, 1, 4, 2, "1f1b", 1, 3}, 2));
  expect_same_training("tiny-mixtral", ep({1, 2, 2, 1, "zb-h1", 1, 3}, 2));
}

// ZeRO over one data rank shards nothing: ZeRO-1 and 2 used to drop every update there (the step
// program has no DP collectives to feed the shards) and ZeRO-3 crashed; they train as zero 0 does.
TEST(Equivalence, ZeroOnOneDataRank) {
  for (int zero : {1, 2, 3}) expect_same_training("tiny-gpt", {1, 1, 1, 8, "1f1b", 1, zero});
  expect_same_training("tiny-gpt", {2, 2, 1, 1, "1f1b", 1, 1});
  expect_same_training("tiny-mixtral", {2, 1, 1, 8, "1f1b", 1, 3, "none", true});
}

// ZeRO-2 and 3 with pipelines (torchtitan's FSDP + PP): each pass's gradients reduce-scattered,
// the tied embedding's summed over the first and last stage per micro-batch first.
TEST(Equivalence, ZeroTwoAndThreeWithPipelines) {
  expect_same_training("tiny-gpt", {1, 2, 2, 1, "1f1b", 1, 2});
  expect_same_training("tiny-gpt", {1, 2, 2, 2, "1f1b", 1, 3});
  expect_same_training("tiny-llama", {1, 2, 2, 1, "interleaved", 2, 3});
  expect_same_training("tiny-gpt", {2, 2, 1, 1, "gpipe", 1, 2, "full", true});
}

// The tied embedding's all-reduce joins the first and the last stage: with overlap_grad_reduce
// it once ran right after the last stage's chunk 1, while stage 0 still waited for that stage's
// chunk-0 gradients, and both hung. It now waits for each stage's last pass.
TEST(Equivalence, TiedEmbeddingWithOverlappedReduction) {
  Layout interleaved{1, 2, 1, 2, "interleaved", 2, 1};
  interleaved.overlap_grad_reduce = true;
  expect_same_training("tiny-gpt", interleaved);
  Layout zero2{1, 2, 2, 1, "1f1b", 1, 2};
  zero2.overlap_grad_reduce = true;
  expect_same_training("tiny-gpt", zero2);
}
}  // namespace
