// planner: ranks every legal way to split a model over N GPUs of a cluster by predicted step time.
//   planner --model M --gpus N [--cluster C] [--global-batch B] [--seq-len S] [--top K]
//           [--format table|json|csv] [--emit plan|megatron|deepspeed --rank R] [--precision P]
#include <chrono>
#include <sstream>
#include <iostream>

#include "planner/export.h"
#include "planner/search.h"
#include "planner/simulation.h"
#include "tools/cli.h"

namespace parallax {
namespace {

constexpr double kGiB = 1073741824.0;

struct Options {
  std::string model, cluster = "dgx-h100", format = "table", emit, precision = "bf16", runtime, schedules;
  int64_t gpus = 0, global_batch = 0, seq_len = 0, top = 10, rank = 1, tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, zero = -1;
  // A plan at 96-100% of HBM runs out on the first fragmentation the allocator margin did not
  // price: by default only plans that leave a tenth of HBM free are ranked.
  double max_memory_fraction = 0.9;
  bool no_offload = false, quiet = false;
  int threads = 0;
  cli::ExecutionFlags execution;
};

std::string schedule_cell(const Plan& p) {
  if (p.schedule == Schedule::kInterleaved) return "interleaved:" + std::to_string(p.virtual_stages);
  return schedule_name(p.schedule);
}

std::vector<std::string> row(size_t rank, const RankedPlan& r, const ClusterSpec& c) {
  const Plan& p = r.plan;
  const StepReport& e = r.report;
  const CommBytes& b = e.comm_bytes_per_gpu;
  const double comm_gb = (b.tp + b.pp + b.dp + b.cp + b.ep) / 1e9;
  // Uneven stages show their first and last stage's layers: "16 (7..7)".
  const std::string pp = std::to_string(p.pp) + (p.uneven() ? " (" + std::to_string(p.first_stage_layers) + ".." +
                                                                    std::to_string(p.last_stage_layers) + ")"
                                                              : "");
  return {std::to_string(rank), std::to_string(p.tp), std::to_string(p.cp), pp, std::to_string(p.dp), std::to_string(p.ep),
          std::to_string(p.zero) + (p.offload ? "+off" : ""), std::to_string(p.micro_batch), schedule_cell(p),
          recompute_name(p.recompute), p.sequence_parallel ? "yes" : "no", cli::fixed(e.step_time_s, 3),
          cli::fixed(e.tokens_per_s, 0), cli::fixed(100 * e.mfu, 1), cli::fixed(e.peak_memory_bytes / kGiB, 1),
          cli::fixed(100 * e.peak_memory_bytes / c.gpu.hbm_bytes(), 0) + (e.peak_memory_bytes > 0.9 * c.gpu.hbm_bytes() ? "!" : ""),
          cli::fixed((c.gpu.hbm_bytes() - e.peak_memory_bytes) / kGiB, 1), cli::fixed(100 * e.bubble_fraction, 1),
          cli::fixed(comm_gb, 1)};
}

const std::vector<std::string> kHeader = {"rank", "TP", "CP", "PP", "DP", "EP", "ZeRO", "mb", "schedule", "recompute", "SP",
                                          "step_s", "tokens/s", "MFU%", "mem_GiB", "HBM%", "free_GiB", "bubble%", "comm_GB"};

nlohmann::json rejections_json(const SearchResult& r) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 0; k < kRejectionKinds; ++k)
    if (r.rejected[k] > 0) j[rejection_key(k)] = r.rejected[k];
  return j;
}

std::string no_plan_message(const SearchResult& r, const ModelSpec& m, const ClusterSpec& c, int64_t gpus,
                            const SearchOptions& so) {
  // Not memory: the fixed degrees leave no configuration, or the framework runs none of the legal ones.
  if (r.considered == 0) {
    std::string fixed;
    for (const auto& [flag, value] : {std::pair{"--tp", so.fixed_tp}, {"--pp", so.fixed_pp}, {"--dp", so.fixed_dp},
                                      {"--cp", so.fixed_cp}, {"--ep", so.fixed_ep}})
      if (value > 0) fixed += std::string(fixed.empty() ? "" : " ") + flag + " " + std::to_string(value);
    return "no configuration of " + std::to_string(gpus) + " GPU(s) has " + (fixed.empty() ? "these settings" : fixed) +
           ": tp x cp x pp x dp must equal the GPU count, so each degree must divide it";
  }
  const int64_t framework = r.rejected[static_cast<size_t>(Rejection::kFramework)];
  if (framework > 0 && r.rejected[static_cast<size_t>(Rejection::kOutOfMemory)] == 0 && r.feasible == 0)
    return "--framework " + so.execution.framework + " runs none of the " + std::to_string(framework) +
           " legal plans (framework_cannot_run), e.g. " + r.framework_refusal;
  std::string msg = "no plan of model '" + m.name + "' fits " + std::to_string(gpus) + " GPU(s) of '" + c.name +
                    "' (" + cli::fixed(c.gpu.hbm_gib, 1) + " GiB each): " + std::to_string(r.considered) +
                    " configurations considered, rejected:";
  for (size_t k = 0; k < kRejectionKinds; ++k)
    if (r.rejected[k] > 0) msg += " " + std::string(rejection_key(k)) + "=" + std::to_string(r.rejected[k]);
  return msg;
}

// Out of memory: the smallest doubling of the GPU count (up to the cluster's size or 1,048,576)
// where some plan fits by the estimate, as a suffix for the error line.
std::string smallest_fitting_count(const ModelSpec& m, const ClusterSpec& c, SearchOptions so, bool default_batch) {
  const int64_t most = c.max_nodes > 0 ? c.max_nodes * c.node.gpus : int64_t{1} << 20;
  so.simulate = false, so.top_k = 1, so.progress = nullptr;
  for (int64_t gpus = 2 * so.gpus; gpus <= most; gpus *= 2) {
    so.gpus = gpus;
    if (default_batch) so.global_batch = default_global_batch(so.seq_len, gpus);
    Result<SearchResult> r = search(m, c, so);
    if (r.ok() && !r->plans.empty()) return "; the smallest doubling that fits is " + std::to_string(gpus) + " GPUs (by the estimate)";
  }
  return "";
}

void emit(const Options& o, const ModelSpec& m, const SearchResult& r) {
  if (o.rank < 1 || static_cast<size_t>(o.rank) > r.plans.size())
    cli::fail("--rank " + std::to_string(o.rank) + " is out of range: " + std::to_string(r.plans.size()) +
              " plan(s) ranked (raise --top to see more)");
  const Plan& p = r.plans[o.rank - 1].plan;
  const std::string& fw = p.execution.framework;
  const bool megatron_family = fw == "megatron" || fw == "nemo" || fw == "megatron-2022";
  if ((o.emit == "megatron" && !fw.empty() && !megatron_family) || (o.emit == "deepspeed" && !fw.empty() && fw != "deepspeed"))
    cli::fail("--emit " + o.emit + " writes what " + o.emit + " runs; these plans were searched for --framework " + fw +
              " (use --emit plan, or --framework " + o.emit + ")");
  if (o.emit == "plan") {
    std::cout << plan_to_json(p).dump(2) << "\n";
  } else if (o.emit == "megatron") {
    const std::string args = cli::value_or_fail(megatron_arguments(m, p));
    std::cerr << "planner: Megatron-LM arguments for " << p.gpus() << " GPUs = TP " << p.tp
              << (p.cp > 1 ? " x CP " + std::to_string(p.cp) : "") << " x PP " << p.pp << " x DP " << p.dp
              << (p.ep > 1 ? " (EP " + std::to_string(p.ep) + " within CP x DP)" : "") << " (DP follows from the world size)\n";
    std::cout << args;
  } else if (o.emit == "deepspeed") {
    std::cout << cli::value_or_fail(deepspeed_config(p)).dump(2) << "\n";
    for (const std::string& note : deepspeed_notes(p)) std::cerr << "planner: note: " << note << "\n";
  } else {
    cli::fail("--emit: unknown '" + o.emit + "' (expected plan|megatron|deepspeed)");
  }
}

void print(const Options& o, const ModelSpec& m, const ClusterSpec& c, const SearchOptions& so,
           const SearchResult& r, double seconds, const nlohmann::json& defaults) {
  if (o.format == "json") {
    nlohmann::json j;
    j["model"] = m.name;
    j["cluster"] = c.name;
    j["gpus"] = so.gpus;
    j["params_total"] = total_params(m);
    j["seq_len"] = so.seq_len;
    j["global_batch"] = so.global_batch;
    j["precision"] = precision_name(so.precision);
    j["defaults"] = defaults;
    j["framework"] = cli::framework_json(so.execution);
    j["model_unpriced"] = m.unpriced;
    j["configurations_considered"] = r.considered;
    j["configurations_evaluated"] = r.evaluated;
    j["configurations_feasible"] = r.feasible;
    j["configurations_simulated"] = r.simulated;
    j["rejected"] = rejections_json(r);
    j["search_time_s"] = seconds;
    j["plans"] = nlohmann::json::array();
    for (const RankedPlan& p : r.plans) j["plans"].push_back(evaluation_to_json(m, p.plan, p.report));
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < r.plans.size(); ++i) rows.push_back(row(i + 1, r.plans[i], c));
  if (o.format == "csv") {
    std::cout << cli::csv_line(kHeader);
    for (const auto& cells : rows) std::cout << cli::csv_line(cells);
    return;
  }
  std::cout << "model " << m.name << " (" << m.model_type << ", " << cli::fixed(total_params(m) / 1e9, 2)
            << "B parameters) on " << so.gpus << " x " << c.gpu.name << " (" << c.name << ")\n"
            << "seq_len " << so.seq_len << ", global batch " << so.global_batch << " sequences ("
            << so.global_batch * so.seq_len << " tokens), " << precision_name(so.precision)
            << (so.execution.fp32_gradients && so.precision != Precision::kFp32 ? " with fp32 gradients" : "")
            << ", attention " << attention_name(so.execution.attention);
  if (!defaults.empty()) std::cout << "  [defaults chosen: " << defaults.dump() << "]";
  if (!so.execution.framework.empty()) std::cout << "\n" << cli::describe_execution(so.execution);
  if (!m.unpriced.empty()) std::cout << "\n" << cli::unpriced_line(m);
  std::cout << "\n\n"
            << cli::render_table(kHeader, rows) << "\n"
            << r.considered << " configurations considered, " << r.evaluated << " legal and distinct, "
            << r.feasible << " fit in memory, " << r.simulated << " simulated; searched in "
            << cli::fixed(seconds * 1e3, 1) << " ms\n"
            << "rejected:";
  for (size_t k = 0; k < kRejectionKinds; ++k)
    if (r.rejected[k] > 0) std::cout << " " << rejection_key(k) << "=" << r.rejected[k];
  std::cout << "\n";
}

int run(int argc, char** argv) {
  cli::set_tool_name("planner");
  keep_freed_memory();
  CLI::App app{"Rank every legal way to split a model over N GPUs by predicted step time."};
  Options o;
  app.add_option("--model", o.model, "Hugging Face config.json, or a name in models/ (e.g. 13b)")->required();
  app.add_option("--gpus", o.gpus, "number of GPUs")->required();
  app.add_option("--cluster", o.cluster, "cluster JSON, or a name in clusters/")->capture_default_str();
  app.add_option("--global-batch", o.global_batch, "sequences per step (default: ~4M tokens)");
  app.add_option("--seq-len", o.seq_len, "sequence length (default: min(max positions, 4096))");
  app.add_option("--top", o.top, "plans to show")->capture_default_str();
  app.add_option("--format", o.format, "table|json|csv")->capture_default_str();
  app.add_option("--emit", o.emit, "print plan --rank as plan|megatron|deepspeed");
  app.add_option("--rank", o.rank, "which ranked plan --emit prints (1 = best)")->capture_default_str();
  app.add_option("--precision", o.precision, "bf16|fp16|fp32|fp8 (FP8 GEMMs, Transformer Engine)")->capture_default_str();
  app.add_option("--threads", o.threads, "search threads (default: all cores)");
  app.add_flag("--quiet", o.quiet, "no progress line on stderr (shown on a terminal after 1 s)");
  cli::add_execution_flags(app, o.execution);
  app.add_option("--runtime", o.runtime, "only plans Parallax's own trainer runs: cpu (MPI ranks) | cuda");
  app.add_option("--max-memory-fraction", o.max_memory_fraction, "only plans whose peak is at most this share of HBM (rows above 0.9 are marked !)")
      ->capture_default_str();
  app.add_flag("--no-offload", o.no_offload, "no optimizer or weight offload to host memory");
  app.add_option("--schedules", o.schedules, "only these schedules, comma-separated (gpipe,1f1b,interleaved,zb-h1)");
  app.add_option("--tp", o.tp, "only this tensor-parallel degree");
  app.add_option("--pp", o.pp, "only this pipeline-parallel degree");
  app.add_option("--dp", o.dp, "only this data-parallel degree");
  app.add_option("--cp", o.cp, "only this context-parallel degree");
  app.add_option("--ep", o.ep, "only this expert-parallel degree (MoE)");
  app.add_option("--zero", o.zero, "only this ZeRO stage");
  cli::parse(app, argc, argv);
  cli::require_format(o.format, {"table", "json", "csv"});
  if (o.gpus < 1) cli::fail("--gpus must be >= 1, got " + std::to_string(o.gpus));
  if (o.top < 1) cli::fail("--top must be >= 1, got " + std::to_string(o.top));
  if (app.count("--global-batch") && o.global_batch < 1) cli::fail("--global-batch must be >= 1");
  if (app.count("--seq-len") && o.seq_len < 1) cli::fail("--seq-len must be >= 1");

  const ModelSpec m = cli::load_model_or_fail(o.model);
  const ClusterSpec c = cli::load_cluster_or_fail(o.cluster);
  SearchOptions so;
  nlohmann::json defaults = nlohmann::json::object();
  so.gpus = o.gpus;
  so.seq_len = o.seq_len > 0 ? o.seq_len : default_seq_len(m);
  so.global_batch = o.global_batch > 0 ? o.global_batch : default_global_batch(so.seq_len, o.gpus);
  so.precision = cli::parse_precision_or_fail(o.precision);
  if (!app.count("--seq-len")) defaults["seq_len"] = so.seq_len;
  if (!app.count("--global-batch")) defaults["global_batch"] = so.global_batch;
  if (!app.count("--precision")) defaults["precision"] = o.precision;
  // Llama 3 405B's largest step was 16M tokens: a billion is tokens typed as sequences.
  if (app.count("--global-batch") && static_cast<double>(so.global_batch) * static_cast<double>(so.seq_len) > 1073741824.0)
    cli::fail("--global-batch counts sequences: " + std::to_string(so.global_batch) + " x " + std::to_string(so.seq_len) +
              " tokens is over a billion tokens per step (tokens typed as sequences? ~4M tokens is " +
              std::to_string(std::max<int64_t>(1, 4194304 / so.seq_len)) + " sequences)");
  so.execution = cli::execution_or_fail(o.execution);
  so.top_k = static_cast<size_t>(std::max<int64_t>(o.top, o.rank));
  so.threads = o.threads;
  so.runtime = o.runtime;
  so.max_memory_fraction = o.max_memory_fraction;
  so.allow_offload = !o.no_offload;
  so.fixed_tp = o.tp, so.fixed_pp = o.pp, so.fixed_dp = o.dp, so.fixed_cp = o.cp, so.fixed_ep = o.ep;
  so.fixed_zero = static_cast<int>(o.zero);
  for (const auto& [flag, value] : {std::pair{"--tp", o.tp}, {"--pp", o.pp}, {"--dp", o.dp}, {"--cp", o.cp}, {"--ep", o.ep}})
    if (app.count(flag) && value < 1) cli::fail(std::string(flag) + " must be >= 1, got " + std::to_string(value));
  if (app.count("--zero") && (o.zero < 0 || o.zero > 3)) cli::fail("--zero must be 0, 1, 2 or 3, got " + std::to_string(o.zero));
  std::stringstream names(o.schedules);
  for (std::string name; std::getline(names, name, ',');) so.schedules.push_back(cli::parse_schedule_or_fail(name));

  const auto start = std::chrono::steady_clock::now();
  cli::Progress progress("planner", o.quiet);
  so.progress = [&](const SearchProgress& p) {
    progress.show(std::to_string(p.fitting) + " plans fit by the estimate; simulated " + std::to_string(p.simulated) +
                  " of up to " + std::to_string(p.candidates) +
                  (p.best_step_s > 0 ? ", best step " + cli::fixed(p.best_step_s, 3) + " s" : ""));
  };
  SearchResult r = cli::value_or_fail(search(m, c, so));
  progress.clear();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.plans.empty()) {
    // Machine-readable formats still print their (empty) document, with the counts of why.
    if (o.emit.empty() && o.format != "table") print(o, m, c, so, r, seconds, defaults);
    std::string message = no_plan_message(r, m, c, o.gpus, so);
    if (r.rejected[static_cast<size_t>(Rejection::kOutOfMemory)] > 0)
      message += smallest_fitting_count(m, c, so, !app.count("--global-batch"));
    cli::fail(message);
  }
  if (!app.count("--global-batch") && (so.global_batch & (so.global_batch - 1)) != 0)  // not ~4M tokens' power of two
    cli::warn("default global batch " + std::to_string(so.global_batch) + " sequences (not a power of two) so that " +
              "it divides over " + std::to_string(o.gpus) + " GPUs; pass --global-batch to choose");
  if (!o.emit.empty()) {
    emit(o, m, r);
    return 0;
  }
  if (r.plans.size() > static_cast<size_t>(o.top)) r.plans.resize(o.top);
  print(o, m, c, so, r, seconds, defaults);
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::run(argc, argv); }
