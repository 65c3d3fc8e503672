// Checkpoints under mpirun: resuming continues bit-exactly (the same fp32 losses to the last bit
// as a run that never stopped), also onto another plan of the same model (to fp32 rounding); a
// corrupt shard or manifest, another model or another batch is refused with exit 2.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

std::string bin() {
  const char* dir = std::getenv("PARALLAX_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/train";
}

std::string temp(const std::string& name) { return testing::TempDir() + "/ckpt_" + std::to_string(getpid()) + "_" + name; }

std::string plan(int tp, int pp, int dp, int zero, const char* precision = "fp32", int global_batch = 8) {
  const std::string path = temp("plan_" + std::to_string(tp) + std::to_string(pp) + std::to_string(dp) +
                                std::to_string(zero) + precision + std::to_string(global_batch) + ".json");
  std::ofstream(path) << nlohmann::json{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"zero", zero}, {"micro_batch", 1},
                                        {"global_batch", global_batch}, {"seq_len", 16}, {"schedule", "1f1b"},
                                        {"recompute", "none"}, {"sequence_parallel", false}, {"precision", precision}}
                             .dump();
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Out {
  int code;
  std::string text;
};

Out train(int ranks, const std::string& plan_file, const std::string& args) {
  const std::string out = temp("out");
  const std::string cmd = "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " + bin() +
                          " --plan " + plan_file + " --model " + PARALLAX_SOURCE_DIR + "/tests/data/tiny-gpt.json " +
                          args + " --format json > " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, s.str()};
}

std::vector<double> losses(const Out& o) {
  const size_t start = o.text.find('{');
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(o.text.substr(start))["losses"].get<std::vector<double>>();
}

TEST(Checkpoint, ResumeIsBitExact) {
  struct Case { int tp, pp, dp, zero; };
  // tp 2 pp 2 zero 1 (one data rank) once differed at the first resumed step.
  for (const Case& c : {Case{1, 1, 2, 1}, Case{1, 2, 1, 0}, Case{2, 1, 2, 3}, Case{2, 2, 1, 1}}) {
    const int ranks = c.tp * c.pp * c.dp;
    const std::string p = plan(c.tp, c.pp, c.dp, c.zero), dir = temp("dir");
    std::filesystem::remove_all(dir);
    const std::vector<double> straight = losses(train(ranks, p, "--steps 4"));
    ASSERT_EQ(straight.size(), 4u);
    ASSERT_EQ(train(ranks, p, "--steps 2 --checkpoint " + dir).code, 0);
    const Out resumed = train(ranks, p, "--steps 4 --checkpoint " + dir + " --resume");
    ASSERT_EQ(resumed.code, 0) << resumed.text;
    const std::vector<double> tail = losses(resumed);
    ASSERT_EQ(tail.size(), 2u);
    EXPECT_EQ(tail[0], straight[2]) << "tp " << c.tp << " pp " << c.pp << " dp " << c.dp << " zero " << c.zero;
    EXPECT_EQ(tail[1], straight[3]);
  }
}

// A checkpoint reshards: tp 2 pp 2 ZeRO-1 resumes on one rank, and one rank on dp 2 ZeRO-3 and
// on pp 4, each continuing the unbroken run's losses to fp32 rounding.
TEST(Checkpoint, ResumesOntoAnotherPlan) {
  const std::string dir = temp("reshard");
  std::filesystem::remove_all(dir);
  const std::vector<double> straight = losses(train(1, plan(1, 1, 1, 0), "--steps 4"));
  ASSERT_EQ(straight.size(), 4u);
  ASSERT_EQ(train(4, plan(2, 2, 1, 1), "--steps 2 --checkpoint " + dir).code, 0);
  struct Case { int tp, pp, dp, zero; };
  for (const Case& c : {Case{1, 1, 1, 0}, Case{1, 1, 2, 3}, Case{1, 4, 1, 0}}) {
    const std::string copy = dir + "-" + std::to_string(c.pp) + std::to_string(c.dp);
    std::filesystem::remove_all(copy);
    std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
    const Out resumed = train(c.tp * c.pp * c.dp, plan(c.tp, c.pp, c.dp, c.zero), "--steps 4 --checkpoint " + copy + " --resume");
    ASSERT_EQ(resumed.code, 0) << resumed.text;
    const std::vector<double> tail = losses(resumed);
    ASSERT_EQ(tail.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(tail[i] / straight[2 + i], 1, 1e-5) << "pp " << c.pp << " dp " << c.dp;
  }
}

TEST(Checkpoint, RefusesCorruptOrMismatchedCheckpoints) {
  const std::string p = plan(1, 1, 2, 0), dir = temp("bad");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(train(2, p, "--steps 1 --checkpoint " + dir).code, 0);
  const Out other = train(2, plan(1, 1, 2, 0, "fp32", 16), "--steps 2 --checkpoint " + dir + " --resume");
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.text.find("written for another global_batch"), std::string::npos) << other.text;
  {
    std::fstream shard(dir + "/step-00000001/rank-1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    shard.seekp(100);
    shard.put(0x42);
  }
  const Out corrupt = train(2, p, "--steps 2 --checkpoint " + dir + " --resume");
  EXPECT_EQ(corrupt.code, 2);
  EXPECT_NE(corrupt.text.find("the shard of rank 1 is missing or corrupt"), std::string::npos) << corrupt.text;
  // A manifest edited by hand into other types is refused, not thrown on.
  const std::string manifest = dir + "/step-00000001/manifest.json";
  const nlohmann::json good = nlohmann::json::parse(read(manifest));
  for (const auto& [key, value] : {std::pair<std::string, nlohmann::json>{"files", {1, 2}}, {"step", "one"},
                                   {"loss_scale", "big"}, {"files", {"../rank-0.safetensors", "rank-1.safetensors"}}}) {
    nlohmann::json edited = good;
    edited[key] = value;
    std::ofstream(manifest) << edited.dump();
    const Out malformed = train(2, p, "--steps 2 --checkpoint " + dir + " --resume");
    EXPECT_EQ(malformed.code, 2) << key;
    EXPECT_NE(malformed.text.find("malformed manifest"), std::string::npos) << key << ": " << malformed.text;
  }
  const Out none = train(2, p, "--steps 2 --checkpoint " + temp("empty") + " --resume");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.text.find("no checkpoint to resume from"), std::string::npos) << none.text;
}

// fp16: an inf in one rank's gradients skips the step on every rank and halves the loss scale;
// training goes on and ends with the weights of a run that skipped that step.
TEST(Overflow, SkippedOnAllRanksAndBacksOff) {
  for (int zero : {0, 2}) {
    const std::string p = plan(1, 1, 2, zero, "fp16"), a = temp("ovA"), b = temp("ovB");
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
    const Out injected = train(2, p, "--steps 5 --inject-overflow-step 2 --checkpoint " + a);
    const Out skipped = train(2, p, "--steps 5 --skip-step 2 --checkpoint " + b);
    ASSERT_EQ(injected.code, 0) << injected.text;
    ASSERT_EQ(skipped.code, 0) << skipped.text;
    const nlohmann::json ji = nlohmann::json::parse(injected.text.substr(injected.text.find('{')));
    const nlohmann::json js = nlohmann::json::parse(skipped.text.substr(skipped.text.find('{')));
    EXPECT_EQ(ji["skipped_steps"], nlohmann::json::array({2}));
    EXPECT_EQ(ji["loss_scale"], 32768.0);  // 65536 backed off once
    EXPECT_EQ(js["loss_scale"], 65536.0);
    EXPECT_EQ(ji["losses"], js["losses"]);
    // Final weights and moments equal bit for bit (the scaler state is in the manifests).
    for (int rank : {0, 1}) {
      const std::string shard = "/step-00000005/rank-" + std::to_string(rank) + ".safetensors";
      EXPECT_EQ(read(a + shard), read(b + shard)) << "zero " << zero << " rank " << rank;
    }
    EXPECT_EQ(nlohmann::json::parse(read(a + "/step-00000005/manifest.json"))["loss_scale"], 32768.0);
  }
}

// --fail-rank kills a rank mid-run: the job must end (not hang), non-zero, within 60 s, and say
// which rank failed.
TEST(FailingRank, JobEndsQuicklyNamingTheRank) {
  const auto start = std::chrono::steady_clock::now();
  const Out o = train(2, plan(1, 2, 1, 0), "--steps 50 --fail-rank 1 --fail-after-steps 2 --watchdog-seconds 20");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(o.code, 0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_TRUE(o.text.find("rank 1") != std::string::npos) << o.text;
}

}  // namespace
