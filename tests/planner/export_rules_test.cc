// Every plan `planner --framework megatron|nemo|deepspeed` lists for bundled models must be one
// the framework accepts. Megatron-LM's own parse_args needs torch, so its rules are checked here
// instead: each flag must be one Megatron-LM@d98e8a64 declares (tests/data/megatron-flags.json,
// written by tests/data/megatron_flags.py from megatron/training/arguments.py and the dataclasses
// it turns into flags) with a value of the declared type, and the validate_args and
// TransformerConfig.__post_init__ rules that the exported flags reach must hold. DeepSpeed's
// config is checked against the rules of deepspeedai/DeepSpeed@edaa7221 (runtime/config.py,
// runtime/engine.py, runtime/pipe/engine.py, __init__.py).
#include <gtest/gtest.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "models/json_fields.h"
#include "planner/export.h"
#include "planner/search.h"
#include "program/framework.h"
#include "program/pipeline_layout.h"

namespace parallax {
namespace {

using Parsed = std::map<std::string, std::vector<std::string>>;

const nlohmann::json& megatron_flags() {
  static const nlohmann::json flags = read_json_file(data_dir() + "/tests/data/megatron-flags.json").value()["flags"];
  return flags;
}

// The emitted line split as a POSIX shell splits it (single quotes only: the exporter uses no other).
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') quoted = !quoted, any = true;
    else if (!quoted && (c == ' ' || c == '\n')) {
      if (any) words.push_back(word);
      word.clear(), any = false;
    } else {
      word += c, any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

bool parses_as(const std::string& type, const std::string& v) {
  if (type == "int") {
    int64_t x = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    return ec == std::errc() && end == v.data() + v.size();
  }
  if (type == "float") {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    return !v.empty() && end == v.c_str() + v.size() && std::isfinite(x);
  }
  return true;  // str, or a callable Megatron applies itself (checked by the rules below)
}

bool in_choices(const nlohmann::json& choices, const std::string& v) {
  for (const auto& c : choices)
    if ((c.is_string() && c.get<std::string>() == v) || (c.is_number() && parses_as("float", v) && c.get<double>() == std::strtod(v.c_str(), nullptr)))
      return true;
  return false;
}

// argparse's reading of the words: each a declared flag, with as many values as it takes, each of
// its type and among its choices. Problems are appended to `bad`.
Parsed parse_megatron(const std::string& line, std::vector<std::string>& bad) {
  const std::vector<std::string> w = shell_words(line);
  Parsed out;
  for (size_t i = 0; i < w.size();) {
    const std::string flag = w[i++];
    const auto spec = megatron_flags().find(flag);
    if (flag.rfind("--", 0) != 0 || spec == megatron_flags().end()) {
      bad.push_back("'" + flag + "' is not a Megatron-LM argument");
      continue;
    }
    if (out.count(flag)) bad.push_back(flag + " given twice");
    std::vector<std::string>& values = out[flag];
    const std::string type = (*spec)["type"].is_string() ? (*spec)["type"].get<std::string>() : "";
    const nlohmann::json nargs = spec->value("nargs", nlohmann::json());
    const size_t most = type == "flag" ? 0 : nargs.is_number() ? nargs.get<size_t>() : nargs == "+" || nargs == "*" ? w.size() : 1;
    while (values.size() < most && i < w.size() && w[i].rfind("--", 0) != 0) values.push_back(w[i++]);
    if (type != "flag" && values.empty() && nargs != "*" && nargs != "?") bad.push_back(flag + " needs a value");
    for (const std::string& v : values) {
      if (!parses_as(type, v)) bad.push_back(flag + " " + v + ": not a " + type);
      if (spec->contains("choices") && !in_choices((*spec)["choices"], v)) bad.push_back(flag + " " + v + ": not a choice");
    }
  }
  return out;
}

struct Args {
  const Parsed& p;
  bool has(const std::string& f) const { return p.count(f) > 0; }
  int64_t num(const std::string& f, int64_t absent) const { return has(f) ? std::atoll(p.at(f)[0].c_str()) : absent; }
  std::string str(const std::string& f, const std::string& absent = "") const { return has(f) ? p.at(f)[0] : absent; }
};

// validate_args: sizes, batch and pipeline split (megatron/training/arguments.py).
void parallel_rules(const Args& a, int64_t world, std::vector<std::string>& bad) {
  auto need = [&](bool ok, const std::string& rule) { if (!ok) bad.push_back(rule); };
  const int64_t tp = a.num("--tensor-model-parallel-size", 1), pp = a.num("--pipeline-model-parallel-size", 1);
  const int64_t cp = a.num("--context-parallel-size", 1), layers = a.num("--num-layers", 0);
  need(world % (tp * pp * cp) == 0, "world size divisible by tp x pp x cp");
  const int64_t dp = world / (tp * pp * cp), mb = a.num("--micro-batch-size", 1);
  need(a.num("--global-batch-size", 0) % (mb * dp) == 0, "global batch divisible by micro batch x dp");
  const bool first_last = a.has("--decoder-first-pipeline-num-layers") || a.has("--decoder-last-pipeline-num-layers");
  if (a.has("--pipeline-model-parallel-layout")) {
    // pipeline_parallel_layer_layout.py: no other split given; the chunks a multiple of pp; every
    // layer placed once.
    need(!first_last && !a.has("--num-layers-per-virtual-pipeline-stage"), "a layout is the only pipeline split");
    std::string quoted = a.str("--pipeline-model-parallel-layout");
    if (quoted.size() >= 2 && quoted.front() == '\'') quoted = quoted.substr(1, quoted.size() - 2);
    const Result<std::vector<int64_t>> chunks = parse_megatron_layout(quoted);
    need(chunks.ok(), "the layout parses");
    if (chunks.ok()) {
      int64_t sum = 0;
      for (int64_t n : *chunks) sum += n;
      need(static_cast<int64_t>(chunks->size()) % pp == 0 && sum == layers, "the layout holds every layer on pp x vp chunks");
    }
  } else if (a.has("--num-layers-per-virtual-pipeline-stage")) {
    need(!first_last, "uneven stages need --num-virtual-stages-per-pipeline-rank, not layers per virtual stage");
    need(layers % pp == 0 && (layers / pp) % a.num("--num-layers-per-virtual-pipeline-stage", 1) == 0,
         "layers per stage divisible by layers per virtual stage");
    need(pp > 1, "interleaving needs pp > 1");
  } else if (!first_last) {
    need(layers % pp == 0, "layers divisible by pp");
  } else {
    const int64_t first = a.num("--decoder-first-pipeline-num-layers", 0), last = a.num("--decoder-last-pipeline-num-layers", 0);
    const int64_t middle = pp - (first > 0) - (last > 0);
    need(middle > 0 ? (layers - first - last) % middle == 0 : layers == first + last, "uneven stages split the layers evenly");
  }
  if (cp > 1) need(a.num("--seq-length", 0) % (2 * cp) == 0, "seq length divisible by 2 x cp");
  need(a.num("--max-position-embeddings", 0) >= a.num("--seq-length", 0), "max positions >= seq length");
  // transformer_config.py: heads and query groups divide by TP.
  need(a.num("--num-attention-heads", 1) % tp == 0, "heads divisible by tp");
  need(a.num("--num-query-groups", tp) % tp == 0, "query groups divisible by tp");
  if (!a.has("--kv-channels") && !a.has("--multi-latent-attention"))
    need(a.num("--hidden-size", 0) % a.num("--num-attention-heads", 1) == 0, "hidden divisible by heads");
  need(!(a.has("--multi-latent-attention") && a.has("--group-query-attention")), "MLA excludes GQA");
}

// validate_args: precision, optimizer, overlap and recompute.
void training_rules(const Args& a, std::vector<std::string>& bad) {
  auto need = [&](bool ok, const std::string& rule) { if (!ok) bad.push_back(rule); };
  need(!(a.has("--bf16") && a.has("--fp16")), "bf16 xor fp16");
  need(!(a.has("--grad-reduce-in-bf16") && a.has("--accumulate-allreduce-grads-in-fp32")), "one gradient dtype");
  if (a.has("--grad-reduce-in-bf16")) need(a.has("--bf16"), "--grad-reduce-in-bf16 with --bf16");
  if (a.has("--overlap-param-gather"))
    need(a.has("--use-distributed-optimizer") && a.has("--overlap-grad-reduce"), "overlap-param-gather needs the distributed optimizer and overlap-grad-reduce");
  if (a.has("--fp8-param-gather")) need(a.has("--use-distributed-optimizer"), "fp8-param-gather needs the distributed optimizer");
  if (a.has("--optimizer-cpu-offload")) {
    need(a.has("--use-precision-aware-optimizer"), "offload needs --use-precision-aware-optimizer");
    need(!a.has("--fp8-param-gather") || a.str("--fp8-recipe") == "delayed", "offload with fp8-param-gather needs the delayed recipe");
  }
  if (a.has("--num-distributed-optimizer-instances")) need(a.has("--use-distributed-optimizer"), "instances need the distributed optimizer");
  if (a.str("--recompute-granularity") == "selective") need(!a.has("--recompute-method"), "selective recompute takes no method");
  if (a.has("--fp8-format")) need(a.has("--bf16") || a.has("--fp16"), "fp8 on a bf16/fp16 model");
  if (a.has("--use-rope-scaling")) need(a.str("--position-embedding-type") == "rope", "rope scaling needs rope");
  const std::string pos = a.str("--position-embedding-type", "learned_absolute");
  if (a.has("--mtp-num-layers"))  // validate_args: MTP needs positions from position_ids
    need(pos == "learned_absolute" || pos == "rope" || pos == "mrope" || pos == "none", "MTP with " + pos + " positions");
  if (a.has("--rope-type")) need(a.has("--multi-latent-attention") || a.str("--rope-type") == "rope", "rope_type yarn only with MLA");
}

// The MoE rules: validate_args, TransformerConfig.__post_init__ and moe_layer.py.
// Megatron's moe_freq_type pattern ("([0]*3+[1]*58)", "(([0]*1+[1]*1)*24)") as _eval_pattern
// evaluates it: lists of 0/1, '+' concatenates, '*' repeats; empty when it is not such a pattern.
struct PatternParser {
  const std::string& s;
  size_t i = 0;
  bool ok = true;
  std::vector<int> expr() {
    std::vector<int> out = term();
    while (ok && i < s.size() && s[i] == '+') {
      ++i;
      std::vector<int> more = term();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
  std::vector<int> term() {
    std::vector<int> base = atom(), out = base;
    while (ok && i < s.size() && s[i] == '*') {
      ++i;
      size_t n = 0;
      const size_t start = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) n = n * 10 + static_cast<size_t>(s[i++] - '0');
      ok = ok && i > start && n > 0 && n < 100000;
      out.clear();
      for (size_t r = 0; ok && r < n; ++r) out.insert(out.end(), base.begin(), base.end());
      base = out;
    }
    return out;
  }
  std::vector<int> atom() {
    std::vector<int> out;
    if (i < s.size() && s[i] == '(') {
      ++i, out = expr();
      ok = ok && i < s.size() && s[i++] == ')';
    } else if (i < s.size() && s[i] == '[') {
      for (++i; ok && i < s.size() && s[i] != ']';) {
        ok = s[i] == '0' || s[i] == '1';
        out.push_back(s[i++] - '0');
        if (i < s.size() && s[i] == ',') ++i;
      }
      ok = ok && i < s.size() && s[i++] == ']';
    } else {
      ok = false;
    }
    return out;
  }
};
std::vector<int> eval_layer_pattern(const std::string& f) {
  PatternParser p{f};
  std::vector<int> out = p.expr();
  return p.ok && p.i == f.size() ? out : std::vector<int>{};
}

void moe_rules(const Args& a, int64_t world, std::vector<std::string>& bad) {
  auto need = [&](bool ok, const std::string& rule) { if (!ok) bad.push_back(rule); };
  if (!a.has("--num-experts")) {
    for (const auto& [flag, v] : a.p) need(flag.rfind("--moe-", 0) != 0 && flag.rfind("--expert-", 0) != 0, flag + " without experts");
    return;
  }
  const int64_t experts = a.num("--num-experts", 1), ep = a.num("--expert-model-parallel-size", 1);
  const int64_t tp = a.num("--tensor-model-parallel-size", 1), pp = a.num("--pipeline-model-parallel-size", 1);
  need(experts % ep == 0, "experts divisible by ep");
  need((world / pp) % (ep * a.num("--expert-tensor-parallel-size", tp)) == 0, "ep x etp divides the ranks of a stage");
  if (tp > 1) need(a.has("--sequence-parallel"), "MoE with tp > 1 needs sequence parallelism (moe_layer.py)");
  const std::string score = a.str("--moe-router-score-function", "softmax");
  if (a.has("--moe-router-enable-expert-bias")) need(score == "sigmoid" || score == "sqrtsoftplus", "expert bias needs a sigmoid router");
  if (a.num("--moe-router-topk", 2) == 1 && score == "softmax") need(a.has("--moe-router-pre-softmax"), "top-1 softmax needs pre-softmax");
  if (a.has("--moe-router-group-topk")) {
    const int64_t groups = a.num("--moe-router-num-groups", 0);
    need(groups > 0 && experts % groups == 0 && a.num("--moe-router-group-topk", 0) <= groups, "group-limited routing sizes");
  }
  if (a.has("--moe-expert-capacity-factor"))
    need(a.str("--moe-router-load-balancing-type", "aux_loss") != "sinkhorn", "capacity factor with an aux-loss balancing");
  if (a.has("--moe-layer-freq")) {  // _eval_pattern: digits, commas, brackets, +, * only; one entry per layer
    const std::vector<int> layers = eval_layer_pattern(a.str("--moe-layer-freq"));
    need(!layers.empty() && static_cast<int64_t>(layers.size()) == a.num("--num-layers", 0), "--moe-layer-freq lists every layer");
  }
}

std::vector<std::string> megatron_problems(const std::string& line, int64_t world) {
  std::vector<std::string> bad;
  const Parsed parsed = parse_megatron(line, bad);
  const Args a{parsed};
  parallel_rules(a, world, bad);
  training_rules(a, bad);
  moe_rules(a, world, bad);
  return bad;
}

// DeepSpeed's rules for the config of `p`.
std::vector<std::string> deepspeed_problems(const nlohmann::json& j, const Plan& p) {
  std::vector<std::string> bad;
  auto need = [&](bool ok, const std::string& rule) { if (!ok) bad.push_back(rule); };
  static const std::set<std::string> keys = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping", "bf16", "fp16",
      "data_types", "communication_data_type", "optimizer", "zero_optimization", "tensor_parallel", "expert_parallel",
      "sequence_parallel_size", "pipeline", "activation_checkpointing"};
  for (const auto& [k, v] : j.items()) need(keys.count(k) > 0, "unknown key " + k);
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    need(j[k].is_number_integer() && j[k].get<int64_t>() >= 1, std::string(k) + " a positive integer");
  const nlohmann::json& z = j["zero_optimization"];
  const int64_t stage = z["stage"].get<int64_t>();
  need(z["reduce_bucket_size"].is_number_integer() && z["reduce_bucket_size"].get<int64_t>() > 0, "reduce_bucket_size an integer");
  // runtime/config.py: train_batch = micro x steps x the data-parallel world (mpu's, or world / sp).
  const int64_t dp_world = p.gpus() / (p.tp * p.pp * p.cp);
  need(j["train_batch_size"].get<int64_t>() ==
           j["train_micro_batch_size_per_gpu"].get<int64_t>() * j["gradient_accumulation_steps"].get<int64_t>() * dp_world,
       "train_batch_size = micro x steps x dp");
  need(stage >= 0 && stage <= 3, "ZeRO stage 0-3");
  need(!(j.contains("bf16") && j.contains("fp16")), "bf16 xor fp16");
  if (p.pp > 1) need(stage < 2, "pipelines run ZeRO 0/1 (pipe/engine.py)");
  if (j.contains("data_types")) need(stage >= 1 || j.contains("bf16") == j.contains("fp16"), "grad_accum_dtype fp32 needs ZeRO (engine.py)");
  if (j.contains("tensor_parallel"))
    need(p.pp == 1 && !j.contains("sequence_parallel_size") && j["tensor_parallel"]["autotp_size"].is_number_integer(), "AutoTP alone");
  if (j.contains("sequence_parallel_size")) need(p.pp == 1 && j["sequence_parallel_size"].is_number_integer(), "Ulysses without a pipeline");
  if (j.contains("expert_parallel")) need(!j.contains("tensor_parallel") && stage != 3, "AutoEP without TP, ZeRO 0-2");
  if (z.contains("mics_shard_size") || z.contains("offload_param")) need(stage == 3, "MiCS and parameter offload with ZeRO-3");
  return bad;
}

// The plans `planner --framework fw` lists (ranked by the estimate, as many as `top`).
std::vector<Plan> listed(const ModelSpec& m, int64_t gpus, const std::string& fw, size_t top) {
  SearchOptions o;
  o.gpus = gpus;
  o.seq_len = default_seq_len(m);
  o.global_batch = default_global_batch(o.seq_len, gpus);
  o.execution = framework_profile(fw).value().execution;
  o.top_k = top;
  o.threads = 2;
  o.simulate = false;
  Result<SearchResult> r = search(m, load_cluster("dgx-h100").value(), o);
  EXPECT_TRUE(r.ok()) << r.error();
  std::vector<Plan> plans;
  if (r.ok())
    for (const RankedPlan& rp : r->plans) plans.push_back(rp.plan);
  return plans;
}

struct Case {
  const char* model;
  int64_t gpus;
};
constexpr Case kCases[] = {{"deepseek-v3", 1024}, {"mixtral-8x7b", 64}, {"llama3.1-405b", 1024}, {"llama3.1-8b", 16},
                           {"qwen1.5-moe-a2.7b", 16}, {"deepseek-v2-lite", 32}, {"gpt3-175b", 256},
                           {"gpt2", 8}, {"mistral-7b", 16}, {"qwen2-7b", 16}, {"13b", 64}, {"llama2-70b", 128}};

TEST(ExportRules, EveryListedMegatronPlanPassesMegatronsChecks) {
  for (const Case& c : kCases) {
    const ModelSpec m = load_model(c.model).value();
    for (const char* fw : {"megatron", "nemo"}) {
      const std::vector<Plan> plans = listed(m, c.gpus, fw, 200);
      EXPECT_FALSE(plans.empty()) << c.model << " " << fw;
      if (std::getenv("EXPORT_RULES_VERBOSE") && !plans.empty())
        std::cerr << c.model << " " << fw << ": " << plans.size() << " plans; first: " << [&] { Result<std::string> l = megatron_arguments(m, plans[0]); return l.ok() ? *l : l.error(); }() << "\n";
      for (const Plan& p : plans) {
        Result<std::string> line = megatron_arguments(m, p);
        ASSERT_TRUE(line.ok()) << c.model << " " << fw << ": " << line.error() << "\n" << plan_to_json(p).dump();
        for (const std::string& problem : megatron_problems(*line, p.gpus()))
          ADD_FAILURE() << c.model << " " << fw << ": " << problem << "\n" << *line;
      }
    }
  }
}

TEST(ExportRules, EveryListedDeepSpeedPlanPassesDeepSpeedsChecks) {
  for (const Case& c : kCases) {
    const ModelSpec m = load_model(c.model).value();
    for (const Plan& p : listed(m, c.gpus, "deepspeed", 200)) {
      Result<nlohmann::json> j = deepspeed_config(p);
      ASSERT_TRUE(j.ok()) << c.model << ": " << j.error() << "\n" << plan_to_json(p).dump();
      for (const std::string& problem : deepspeed_problems(*j, p))
        ADD_FAILURE() << c.model << ": " << problem << "\n" << j->dump();
    }
  }
}

// Every real config Parallax reads (mlc-llm's presets, tests/data/mlc-llm-presets.json): either
// Megatron-LM's command line cannot express it, said in one line, or its export passes the checks.
TEST(ExportRules, RealConfigsExportOrRefuseInOneLine) {
  Result<nlohmann::json> presets = read_json_file(data_dir() + "/tests/data/mlc-llm-presets.json");
  if (!presets.ok()) GTEST_SKIP() << presets.error();
  int exported = 0, refused = 0;
  for (const auto& [name, config] : (*presets)["presets"].items()) {
    Result<ModelSpec> m = model_from_hf_config(config, name);
    if (!m.ok()) continue;  // not a model Parallax reads (the model tests say which)
    Plan p;
    p.dp = 8, p.zero = 1, p.global_batch = 64, p.seq_len = default_seq_len(*m);
    if (m->is_moe()) p.ep = 1;
    Result<std::string> line = megatron_arguments(*m, p);
    if (!line.ok()) {
      ++refused;
      EXPECT_EQ(line.error().find('\n'), std::string::npos) << name;
      EXPECT_EQ(line.error().rfind("--emit megatron: ", 0), 0u) << name << ": " << line.error();
      if (std::getenv("EXPORT_RULES_VERBOSE")) std::cerr << name << ": " << line.error() << "\n";
      continue;
    }
    ++exported;
    for (const std::string& problem : megatron_problems(*line, p.gpus())) ADD_FAILURE() << name << ": " << problem << "\n" << *line;
  }
  EXPECT_GT(exported, 20);
  if (std::getenv("EXPORT_RULES_VERBOSE")) std::cerr << exported << " exported, " << refused << " refused\n";
}

// A model Megatron-LM's command line cannot express (Gemma 2: GeGLU, sandwich norms) gets no plan
// for --framework megatron or nemo, and the search says why in one line (planner_main's no-plan
// message prints framework_refusal), rather than listing plans --emit megatron then refuses.
TEST(ExportRules, ModelMegatronCannotExpressListsNoPlan) {
  Result<nlohmann::json> presets = read_json_file(data_dir() + "/tests/data/mlc-llm-presets.json");
  ASSERT_TRUE(presets.ok()) << presets.error();
  const ModelSpec m = model_from_hf_config((*presets)["presets"]["gemma2_2b"], "gemma2_2b").value();
  const std::string why = megatron_model_refusal(m);
  ASSERT_NE(why, "");
  EXPECT_EQ(why.find('\n'), std::string::npos);
  for (const char* fw : {"megatron", "nemo"}) {
    SearchOptions o;
    o.gpus = 8, o.seq_len = 4096, o.global_batch = 64, o.top_k = 5, o.threads = 2, o.simulate = false;
    o.execution = framework_profile(fw).value().execution;
    Result<SearchResult> r = search(m, load_cluster("dgx-h100").value(), o);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_TRUE(r->plans.empty()) << fw;
    EXPECT_EQ(r->framework_refusal, std::string(fw) + " cannot run " + m.name + ": " + why);
    EXPECT_GT(r->rejected[static_cast<size_t>(Rejection::kFramework)], 0);
  }
  // Parallax's own defaults and DeepSpeed still plan it.
  SearchOptions o;
  o.gpus = 8, o.seq_len = 4096, o.global_batch = 64, o.top_k = 1, o.threads = 2, o.simulate = false;
  EXPECT_FALSE(search(m, load_cluster("dgx-h100").value(), o).value().plans.empty());
}

// The checks themselves catch what the frameworks reject.
TEST(ExportRules, ChecksCatchWhatTheFrameworksReject) {
  EXPECT_FALSE(megatron_problems("--rotary-base 1e+06 --num-layers 2 --num-attention-heads 1 --hidden-size 8", 1).empty());
  EXPECT_FALSE(megatron_problems("--swiglu yes --num-layers 2", 1).empty());
  EXPECT_FALSE(megatron_problems("--no-such-flag --num-layers 2", 1).empty());
  EXPECT_FALSE(megatron_problems("--optimizer-cpu-offload --num-layers 2", 1).empty());
  EXPECT_FALSE(megatron_problems("--num-experts 8 --moe-router-enable-expert-bias --num-layers 2", 1).empty());
  EXPECT_TRUE(megatron_problems("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --max-position-embeddings 8 "
                                "--seq-length 8 --moe-aux-loss-coeff 0.02",
                                1)
                  .size() == 1);  // --moe-aux-loss-coeff without experts: the one problem
  EXPECT_EQ(eval_layer_pattern("(([0]*1+[1]*1)*3+[0]*2)"), (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(eval_layer_pattern("([0]*3+[1]*58)").size(), 61u);
  EXPECT_TRUE(eval_layer_pattern("([0]*3+[2]*58)").empty());
  EXPECT_FALSE(megatron_problems("--num-layers 4 --hidden-size 8 --num-attention-heads 2 --max-position-embeddings 8 "
                                 "--seq-length 8 --num-experts 2 --moe-layer-freq '([0]*1+[1]*2)'",
                                 1)
                   .empty());  // three entries for four layers
  EXPECT_EQ(shell_words("--moe-layer-freq '([0]*3+[1]*58)' --bf16\n"),
            (std::vector<std::string>{"--moe-layer-freq", "([0]*3+[1]*58)", "--bf16"}));
}

}  // namespace
}  // namespace parallax
