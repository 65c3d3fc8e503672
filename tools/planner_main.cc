// planner: ranks every legal way to split a model over N GPUs of a cluster by predicted step time.
//   planner --model M --gpus N [--cluster C] [--global-batch B] [--seq-len S] [--top K]
//           [--format table|json|csv] [--emit plan|megatron|deepspeed --rank R] [--precision P]
//           [--train-tokens 15T [--gpu-hour-price USD]] [--explain A,B] [--html REPORT.html]
#include <algorithm>
#include <chrono>
#include <sstream>
#include <iostream>
#include <tuple>

#include "planner/export.h"
#include "planner/search.h"
#include "planner/simulation.h"
#include "simulator/trace.h"
#include "tools/cli.h"
#include "tools/explain.h"
#include "tools/report_html.h"
#include "tools/training_cost.h"

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
  // The questions after the ranking: how long and how much, why one plan beats another, a page.
  std::string train_tokens_text, explain, html;
  double train_tokens = 0, gpu_hour_price_usd = 0;
  int64_t explain_a = 0, explain_b = 0;
};

TrainingCost cost_of(const Options& o, const RankedPlan& r) {
  return training_cost(o.train_tokens, r.plan.global_batch, r.plan.seq_len, r.report.step_time_s, r.plan.gpus(),
                       o.gpu_hour_price_usd);
}

std::string schedule_cell(const Plan& p) {
  if (p.schedule == Schedule::kInterleaved) return "interleaved:" + std::to_string(p.virtual_stages);
  return schedule_name(p.schedule);
}

std::vector<std::string> row(size_t rank, const RankedPlan& r, const ModelSpec& m, const ClusterSpec& c, const Options& o) {
  const Plan& p = r.plan;
  const StepReport& e = r.report;
  const CommBytes& b = e.comm_bytes_per_gpu;
  const std::optional<StepBand> band = cli::step_band_of(c, m, p, e.step_time_s);
  const double comm_gb = (b.tp + b.pp + b.dp + b.cp + b.ep) / 1e9;
  // Uneven stages show their first and last stage's layers: "16 (7..7)".
  const std::string pp = std::to_string(p.pp) + (p.uneven() ? " (" + std::to_string(p.stage_layers(m.layers, 0)) + ".." +
                                                                    std::to_string(p.stage_layers(m.layers, p.pp - 1)) + ")"
                                                              : "");
  std::vector<std::string> cells = {
          std::to_string(rank), std::to_string(p.tp), std::to_string(p.cp), pp, std::to_string(p.dp), std::to_string(p.ep),
          std::to_string(p.zero) + (p.offload ? "+off" : ""), std::to_string(p.micro_batch), schedule_cell(p),
          recompute_name(p.recompute), p.sequence_parallel ? "yes" : "no",
          cli::fixed(e.step_time_s, 3) + (o.format == "csv" ? "" : cli::band_suffix(band, 2)),
          cli::fixed(e.tokens_per_s, 0), cli::fixed(100 * e.mfu, 1), cli::fixed(e.peak_memory_bytes / kGiB, 1),
          cli::fixed(100 * e.peak_memory_bytes / c.gpu.hbm_bytes(), 0) + (e.peak_memory_bytes > 0.9 * c.gpu.hbm_bytes() ? "!" : ""),
          cli::fixed((c.gpu.hbm_bytes() - e.peak_memory_bytes) / kGiB, 1), cli::fixed(100 * e.bubble_fraction, 1),
          cli::fixed(comm_gb, 1)};
  if (o.format == "csv") {  // the band as numbers of its own
    cells.push_back(band ? cli::fixed(band->low_s, 3) : "");
    cells.push_back(band ? cli::fixed(band->high_s, 3) : "");
  }
  if (o.train_tokens > 0) {
    const TrainingCost t = cost_of(o, r);
    // Days scale with the step: the step's band is the run's.
    const double per_s = t.days / e.step_time_s;
    cells.push_back(cli::fixed(t.days, 1) + (band && o.format != "csv"
                                                 ? " (" + cli::fixed(band->low_s * per_s, 0) + "-" + cli::fixed(band->high_s * per_s, 0) + ")"
                                                 : ""));
    cells.push_back(cli::fixed(t.gpu_hours, 0));
    if (o.gpu_hour_price_usd > 0) cells.push_back(cli::fixed(t.cost_usd, 0));
  }
  return cells;
}

const std::vector<std::string> kHeader = {"rank", "TP", "CP", "PP", "DP", "EP", "ZeRO", "mb", "schedule", "recompute", "SP",
                                          "step_s", "tokens/s", "MFU%", "mem_GiB", "HBM%", "free_GiB", "bubble%", "comm_GB"};

// With --train-tokens: wall-clock days and GPU-hours of the whole run, and its cost with a price.
std::vector<std::string> header(const Options& o) {
  std::vector<std::string> h = kHeader;
  if (o.format == "csv") h.insert(h.end(), {"step_s_band_low", "step_s_band_high"});
  if (o.train_tokens > 0) h.insert(h.end(), {"days", "GPU_hours"});
  if (o.gpu_hour_price_usd > 0) h.push_back("cost_USD");
  return h;
}

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

// --explain's comparison of two ranked plans: null / empty without it.
struct Explained {
  nlohmann::json json;
  std::string text;
};

Explained explain_plans(const Options& o, const ModelSpec& m, const ClusterSpec& c, const SearchResult& r) {
  if (o.explain.empty()) return {};
  for (int64_t rank : {o.explain_a, o.explain_b})
    if (static_cast<size_t>(rank) > r.plans.size())
      cli::fail("--explain " + o.explain + ": only " + std::to_string(r.plans.size()) + " plan(s) ranked");
  // The search keeps each plan's report, not its per-stage figures: simulate the two again.
  auto terms = [&](int64_t rank) {
    return plan_terms(m, c, cli::value_or_fail(simulate_report(m, c, r.plans[rank - 1].plan)));
  };
  const PlanTerms a = terms(o.explain_a), b = terms(o.explain_b);
  const std::string na = "plan " + std::to_string(o.explain_a), nb = "plan " + std::to_string(o.explain_b);
  return {explain_json(static_cast<int>(o.explain_a), static_cast<int>(o.explain_b), a, b),
          "why " + na + " and " + nb + " differ (time: seconds per step on each plan's busiest stage; memory: GiB per "
          "GPU on its fullest stage)\n" + explain_text(na, nb, a, b)};
}

void print_json(const Options& o, const ModelSpec& m, const ClusterSpec& c, const SearchOptions& so,
                const SearchResult& r, double seconds, const nlohmann::json& defaults, const Explained& why) {
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
  j["attention_kernel"] = cli::attention_json(m, c, so.execution);
  j["calibration"] = c.calibration.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.calibration.name);
  j["configurations_considered"] = r.considered;
  j["configurations_evaluated"] = r.evaluated;
  j["configurations_feasible"] = r.feasible;
  j["configurations_simulated"] = r.simulated;
  j["rejected"] = rejections_json(r);
  j["search_time_s"] = seconds;
  j["plans"] = nlohmann::json::array();
  if (o.train_tokens > 0) j["train_tokens"] = o.train_tokens;
  if (o.gpu_hour_price_usd > 0) j["gpu_hour_price_usd"] = o.gpu_hour_price_usd;
  for (const RankedPlan& p : r.plans) {
    nlohmann::json plan = evaluation_to_json(m, p.plan, p.report);
    plan["band"] = cli::band_json(c, m, p.plan, p.report.step_time_s, p.report.mfu);
    if (o.train_tokens > 0) {
      const TrainingCost t = cost_of(o, p);
      plan["training"] = {{"steps", t.steps}, {"days", t.days}, {"gpu_hours", t.gpu_hours}};
      if (const std::optional<StepBand> b = cli::step_band_of(c, m, p.plan, p.report.step_time_s))
        plan["training"]["days_band"] = {t.days * b->low_s / p.report.step_time_s, t.days * b->high_s / p.report.step_time_s};
      if (o.gpu_hour_price_usd > 0) plan["training"]["cost_usd"] = t.cost_usd;
    }
    j["plans"].push_back(std::move(plan));
  }
  if (!why.json.is_null()) j["explain"] = why.json;
  std::cout << j.dump(2) << "\n";
}

// What the step_s band is, and which plans' bands overlap plan 1's: the ranking between those is
// within what the model has got wrong before.
std::string band_line(const ModelSpec& m, const ClusterSpec& c, const SearchResult& r) {
  if (c.calibration.empty()) return "calibration: none (physics only; --calibration NAME to use one)";
  std::string line = "calibration " + c.calibration.name;
  const std::optional<StepBand> first = r.plans.empty() ? std::nullopt
                                                        : cli::step_band_of(c, m, r.plans[0].plan, r.plans[0].report.step_time_s);
  if (!first) return line + " (no bands)";
  line += "; step_s (lo-hi): the 10-90% band of " + std::to_string(first->runs) + " held-out published runs (" +
          first->run_class + ")";
  std::string overlap;
  for (size_t i = 1; i < r.plans.size(); ++i) {
    const std::optional<StepBand> b = cli::step_band_of(c, m, r.plans[i].plan, r.plans[i].report.step_time_s);
    if (b && b->low_s <= first->high_s) overlap += (overlap.empty() ? "" : ", ") + std::to_string(i + 1);
  }
  return line + (overlap.empty() ? "; no other plan's band overlaps plan 1's" : "; bands overlapping plan 1's: " + overlap);
}

void print(const Options& o, const ModelSpec& m, const ClusterSpec& c, const SearchOptions& so,
           const SearchResult& r, double seconds, const nlohmann::json& defaults, const Explained& why) {
  if (o.format == "json") return print_json(o, m, c, so, r, seconds, defaults, why);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < r.plans.size(); ++i) rows.push_back(row(i + 1, r.plans[i], m, c, o));
  if (o.format == "csv") {
    std::cout << cli::csv_line(header(o));
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
  if (m.is_moe()) {
    Plan routing;
    routing.execution = so.execution;
    std::cout << "\n" << cli::moe_routing_line(m, routing);
  }
  if (const std::string a = cli::attention_line(m, c, so.execution); !a.empty()) std::cout << "\n" << a;
  if (!m.unpriced.empty()) std::cout << "\n" << cli::unpriced_line(m);
  // MFU depends on how attention is counted; name it (the JSON's hfu is what the kernels execute).
  std::cout << "\nMFU% by model FLOPs, " << kModelFlopsConvention << " (hardware FLOPs as executed: hfu in --format json)";
  if (o.train_tokens > 0)
    std::cout << "\ntraining on " << o.train_tokens_text << " tokens = "
              << cli::fixed(o.train_tokens / static_cast<double>(so.global_batch * so.seq_len), 0) << " steps of "
              << so.global_batch * so.seq_len << " tokens (days, GPU_hours: the whole run at each plan's step_s)"
              << (o.gpu_hour_price_usd > 0 ? ", at $" + cli::fixed(o.gpu_hour_price_usd, 2) + " per GPU-hour" : "");
  std::cout << "\n" << band_line(m, c, r) << "\n\n"
            << cli::render_table(header(o), rows) << "\n"
            << r.considered << " configurations considered, " << r.evaluated << " legal and distinct, "
            << r.feasible << " fit in memory, " << r.simulated << " simulated; searched in "
            << cli::fixed(seconds * 1e3, 1) << " ms\n"
            << "rejected:";
  for (size_t k = 0; k < kRejectionKinds; ++k)
    if (r.rejected[k] > 0) std::cout << " " << rejection_key(k) << "=" << r.rejected[k];
  std::cout << "\n";
  if (!why.text.empty()) std::cout << "\n" << why.text;
}

void add_question_options(CLI::App& app, Options& o) {
  app.add_option("--train-tokens", o.train_tokens_text,
                 "tokens to train on (15T, 300B, 2e12): each plan's days and GPU-hours");
  app.add_option("--gpu-hour-price", o.gpu_hour_price_usd, "US dollars per GPU-hour (with --train-tokens): each plan's cost");
  app.add_option("--explain", o.explain, "two ranks, e.g. 1,2: their time and memory side by side, and what decides");
  app.add_option("--html", o.html, "also write a self-contained HTML report (table, charts) to this file");
}

// "1,2" -> two distinct ranks >= 1; anything else is one line naming --explain.
std::pair<int64_t, int64_t> parse_rank_pair(const std::string& text) {
  const std::string usage = "--explain takes two different ranks of the table, e.g. 1,2; got '" + text + "'";
  const size_t comma = text.find(',');
  if (comma == std::string::npos) cli::fail(usage);
  auto rank = [&](const std::string& piece) {
    if (piece.empty() || piece.size() > 6 || piece.find_first_not_of("0123456789") != std::string::npos) cli::fail(usage);
    const int64_t value = std::stoll(piece);
    if (value < 1) cli::fail(usage);
    return value;
  };
  const int64_t a = rank(text.substr(0, comma)), b = rank(text.substr(comma + 1));
  if (a == b) cli::fail(usage);
  return {a, b};
}

void check_question_options(const CLI::App& app, Options& o) {
  if (app.count("--train-tokens")) o.train_tokens = cli::value_or_fail(parse_token_count(o.train_tokens_text));
  if (app.count("--gpu-hour-price")) {
    if (!app.count("--train-tokens")) cli::fail("--gpu-hour-price needs --train-tokens (it prices a whole run)");
    if (!(o.gpu_hour_price_usd > 0 && o.gpu_hour_price_usd < 1e6))
      cli::fail("--gpu-hour-price must be US dollars per GPU-hour, above 0 and below 1,000,000");
  }
  if (!o.explain.empty()) {
    std::tie(o.explain_a, o.explain_b) = parse_rank_pair(o.explain);
    if (o.format == "csv") cli::fail("--explain prints with --format table or json, not csv");
  }
  if (!o.emit.empty() && (!o.explain.empty() || !o.html.empty()))
    cli::fail("--emit prints one plan; --explain and --html go with the ranking (drop --emit)");
}

// Every plan that fits, by the analytical estimate: the search without its simulation keeps them
// at the cost of the estimate, milliseconds. The fastest 65,536 at most (about 50 MB of plans
// and reports held at once; the largest searches fit hundreds of thousands).
std::vector<ReportPoint> every_fitting_plan(const ModelSpec& m, const ClusterSpec& c, SearchOptions so) {
  so.simulate = false, so.top_k = size_t{1} << 16, so.progress = nullptr;
  std::vector<ReportPoint> points;
  Result<SearchResult> all = search(m, c, so);
  if (all.ok())
    for (const RankedPlan& p : all->plans) points.push_back({p.report.step_time_s, p.report.peak_memory_bytes, 0, ""});
  return points;
}

std::string plan_title(const ModelSpec& m, const ClusterSpec& c, const Plan& p, double step_s) {
  return m.name + " on " + std::to_string(p.gpus()) + " x " + c.gpu.name + ": TP " + std::to_string(p.tp) +
         (p.cp > 1 ? " CP " + std::to_string(p.cp) : "") + " PP " + std::to_string(p.pp) + " DP " + std::to_string(p.dp) +
         (p.ep > 1 ? " EP " + std::to_string(p.ep) : "") + " ZeRO " + std::to_string(p.zero) + ", " + schedule_cell(p) +
         ", step " + cli::fixed(step_s, 3) + " s";
}

void write_report(const Options& o, const ModelSpec& m, const ClusterSpec& c, const SearchOptions& so, const SearchResult& r) {
  PlannerReport report;
  report.title = "Parallax: " + m.name + " on " + std::to_string(so.gpus) + " x " + c.gpu.name + " (" + c.name + ")";
  report.settings = {"seq_len " + std::to_string(so.seq_len) + ", global batch " + std::to_string(so.global_batch) +
                         " sequences, " + precision_name(so.precision) + "; " + cli::describe_execution(so.execution),
                     std::to_string(r.considered) + " configurations considered, " + std::to_string(r.evaluated) +
                         " legal and distinct, " + std::to_string(r.feasible) + " fit in memory, " +
                         std::to_string(r.simulated) + " simulated"};
  if (o.train_tokens > 0)
    report.settings.push_back("training on " + o.train_tokens_text +
                              " tokens: days and GPU_hours are the whole run at each plan's step_s");
  report.header = header(o);
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const RankedPlan& p = r.plans[i];
    report.rows.push_back(row(i + 1, p, m, c, o));
    report.ranked.push_back({p.report.step_time_s, p.report.peak_memory_bytes, static_cast<int>(i + 1),
                             "plan " + std::to_string(i + 1) + ": " + plan_title(m, c, p.plan, p.report.step_time_s)});
  }
  report.fitting = every_fitting_plan(m, c, so);
  report.fitting_total = r.feasible;
  const Plan& best = r.plans[0].plan;
  if (Result<Simulation> sim = simulate_step(m, c, best); sim.ok())
    report.best_timeline_svg = simulation_svg(*sim, plan_title(m, c, best, sim->report.step_time_s));
  report.best_memory = r.plans[0].report.memory;
  report.hbm_bytes = c.gpu.hbm_bytes();
  report.max_memory_fraction = so.max_memory_fraction;
  if (Status s = write_text_file(o.html, planner_report_html(report)); !s.ok()) cli::fail("--html: " + s.error());
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
  add_question_options(app, o);
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
  check_question_options(app, o);
  if (o.gpus < 1) cli::fail("--gpus must be >= 1, got " + std::to_string(o.gpus));
  if (o.top < 1) cli::fail("--top must be >= 1, got " + std::to_string(o.top));
  if (app.count("--global-batch") && o.global_batch < 1) cli::fail("--global-batch must be >= 1");
  if (app.count("--seq-len") && o.seq_len < 1) cli::fail("--seq-len must be >= 1");

  const ModelSpec m = cli::load_model_or_fail(o.model);
  const ClusterSpec c = cli::load_cluster_or_fail(o.cluster, o.execution.calibration);
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
  so.top_k = static_cast<size_t>(std::max({o.top, o.rank, o.explain_a, o.explain_b}));
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
    if (o.emit.empty() && o.format != "table") print(o, m, c, so, r, seconds, defaults, {});
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
  const Explained why = explain_plans(o, m, c, r);
  if (r.plans.size() > static_cast<size_t>(o.top)) r.plans.resize(o.top);
  if (!o.html.empty()) write_report(o, m, c, so, r);
  print(o, m, c, so, r, seconds, defaults, why);
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::run(argc, argv); }
