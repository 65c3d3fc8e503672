#include "tools/explain.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "tools/cli.h"

namespace parallax {

namespace {

constexpr double kGiB = 1073741824.0;

double d(int64_t x) { return static_cast<double>(x); }

double sum(const std::vector<std::pair<std::string, double>>& terms) {
  double s = 0;
  for (const auto& t : terms) s += t.second;
  return s;
}

// The stage whose own work is largest: its idle time is the schedule's bubble, not waiting on a
// slower neighbour.
size_t busiest_stage(const Simulation& sim) {
  size_t best = 0;
  for (size_t s = 1; s < sim.stages.size(); ++s)
    if (sim.stages[s].busy_s > sim.stages[best].busy_s) best = s;
  return best;
}

// The optimizer step as it runs on the GPU, without offload's host passes and PCIe copies: the
// same cost function the simulation priced the step with, on the plan without offload.
double on_gpu_optimizer_s(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  Plan local = plan;
  local.offload = false;
  double most = 0;
  for (int64_t s = 0; s < plan.pp; ++s) most = std::max(most, optimizer_step_s(c, local, stage_param_split(m, plan, s)));
  return most + plan.execution.step_overhead_us * 1e-6;
}

}  // namespace

PlanTerms plan_terms(const ModelSpec& m, const ClusterSpec& c, const Simulation& sim) {
  const Plan& p = sim.plan;
  const StepReport& e = sim.report;
  const StageReport& st = sim.stages[busiest_stage(sim)];
  // Per layer pass as the simulation's lowering prices it; recompute is what the backward re-runs
  // over the same plan without recompute, its TP collectives left in the TP term.
  const LayerTiming layer = layer_timing(m, c, p);
  Plan plain = p;
  plain.recompute = Recompute::kNone;
  const LayerTiming none = layer_timing(m, c, plain);
  const double passes = d(p.micro_batches()) * d(p.max_stage_layers(m.layers));
  const double recompute_s = std::max(0.0, passes * ((layer.backward_input_s - layer.tp_backward_input_s) -
                                                      (none.backward_input_s - none.tp_backward_input_s)));
  const double exchange_s = passes * (layer.exchange_forward_s + layer.exchange_backward_s);
  const double exchange_bytes = layer.cp_bytes + layer.ep_bytes;
  const double cp_s = exchange_bytes > 0 ? exchange_s * layer.cp_bytes / exchange_bytes : 0;
  const double ep_s = exchange_s - cp_s;
  const double offload_s = p.offload ? std::max(0.0, e.optimizer_s - on_gpu_optimizer_s(m, c, p)) : 0.0;
  PlanTerms t;
  t.step_time_s = e.step_time_s;
  t.time_s = {{"compute", std::max(0.0, st.busy_s - st.tp_s - exchange_s - recompute_s)},
              {"recompute", recompute_s},
              {"exposed TP comm", st.tp_s},
              {"exposed CP comm", cp_s},
              {"exposed EP comm", ep_s},
              {"exposed PP comm", st.exposed_pp_s},
              {"exposed DP/ZeRO comm", st.exposed_dp_s},
              {"optimizer", e.optimizer_s - offload_s},
              {"offload transfers", offload_s}};
  // What is left of the step on that stage is idle time: the pipeline's fill and drain.
  t.time_s.insert(t.time_s.begin() + 6, {"bubble", std::max(0.0, e.step_time_s - sum(t.time_s))});
  const MemoryBreakdown& mem = e.memory;
  t.peak_memory_bytes = e.peak_memory_bytes;
  t.memory_bytes = {{"weights", mem.weights},         {"gradients", mem.gradients}, {"optimizer states", mem.optimizer},
                    {"activations", mem.activations}, {"buffers", mem.buffers},     {"margin and reserve", mem.margin}};
  return t;
}

std::string deciding_terms(const std::string& name_a, const std::string& name_b,
                           const std::vector<std::pair<std::string, double>>& a,
                           const std::vector<std::pair<std::string, double>>& b, const std::string& unit) {
  const bool time = unit == "s";
  auto amount = [&](double v) { return cli::fixed(std::fabs(v) / (time ? 1.0 : kGiB), time ? 3 : 1) + " " + unit; };
  const double total_a = sum(a), total_b = sum(b), diff = total_b - total_a;
  auto sentence = [](std::string s) {
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return s + ".";
  };
  if (std::fabs(diff) <= 1e-3 * std::max(total_a, total_b))
    return sentence(name_a + " and " + name_b + (time ? " take the same time per step" : " need the same memory per GPU") +
                    " (within 0.1%)");
  const double sign = diff > 0 ? 1 : -1;
  const std::string& better = diff > 0 ? name_a : name_b;
  const std::string& worse = diff > 0 ? name_b : name_a;
  // Each term's share of the difference, positive where it favours the better plan.
  std::vector<std::pair<std::string, double>> share;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) share.push_back({a[i].first, sign * (b[i].second - a[i].second)});
  std::stable_sort(share.begin(), share.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  const char* less = time ? " shorter" : " less";
  std::string s = better + (time ? " is " : " needs ") + amount(diff) + " (" +
                  cli::fixed(100 * std::fabs(diff) / std::max(total_a, total_b), 1) + "%) " +
                  (time ? "faster per step than " : "less memory per GPU than ") + worse + ": " + share[0].first + " " +
                  amount(share[0].second) + less;
  if (share.size() > 1 && share[1].second > 0 && share[1].second >= 0.25 * share[0].second)
    s += ", " + share[1].first + " " + amount(share[1].second) + less;
  if (share.back().second < 0 && -share.back().second >= 0.25 * std::fabs(diff))
    s += ", partly offset by " + share.back().first + " " + amount(share.back().second) + (time ? " longer" : " more");
  return sentence(s);
}

std::string explain_text(const std::string& name_a, const std::string& name_b, const PlanTerms& a, const PlanTerms& b) {
  std::vector<std::vector<std::string>> rows;
  auto add = [&](const std::string& name, double x, double y, bool time) {
    const double scale = time ? 1 : 1 / kGiB;
    const int places = time ? 3 : 2;
    std::string diff = cli::fixed((y - x) * scale, places);
    if (diff.find_first_not_of("-0.") == std::string::npos) diff = cli::fixed(0, places);  // no "-0.000"
    else if (y > x) diff = "+" + diff;
    rows.push_back({name, cli::fixed(x * scale, places), cli::fixed(y * scale, places), diff});
  };
  for (size_t i = 0; i < a.time_s.size(); ++i) add("  " + a.time_s[i].first, a.time_s[i].second, b.time_s[i].second, true);
  add("step time (s)", a.step_time_s, b.step_time_s, true);
  for (size_t i = 0; i < a.memory_bytes.size(); ++i)
    add("  " + a.memory_bytes[i].first, a.memory_bytes[i].second, b.memory_bytes[i].second, false);
  add("peak memory (GiB)", a.peak_memory_bytes, b.peak_memory_bytes, false);
  // The time rows above their total, the memory rows above theirs: move each total before its terms.
  std::rotate(rows.begin(), rows.begin() + static_cast<long>(a.time_s.size()), rows.begin() + static_cast<long>(a.time_s.size()) + 1);
  const auto mem_start = rows.begin() + static_cast<long>(a.time_s.size()) + 1;
  std::rotate(mem_start, mem_start + static_cast<long>(a.memory_bytes.size()), rows.end());
  return cli::render_table({"term", name_a, name_b, "difference"}, rows) +
         deciding_terms(name_a, name_b, a.time_s, b.time_s, "s") + "\n" +
         deciding_terms(name_a, name_b, a.memory_bytes, b.memory_bytes, "GiB") + "\n";
}

namespace {
// "exposed DP/ZeRO comm" -> "exposed_dp_zero_comm": the label as a JSON key.
std::string key_of(const std::string& label) {
  std::string key;
  for (char c : label) key += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return key;
}
}  // namespace

nlohmann::json explain_json(int rank_a, int rank_b, const PlanTerms& a, const PlanTerms& b) {
  nlohmann::json time = nlohmann::json::object(), memory = nlohmann::json::object();
  for (size_t i = 0; i < a.time_s.size(); ++i) time[key_of(a.time_s[i].first)] = {a.time_s[i].second, b.time_s[i].second};
  for (size_t i = 0; i < a.memory_bytes.size(); ++i)
    memory[key_of(a.memory_bytes[i].first)] = {a.memory_bytes[i].second, b.memory_bytes[i].second};
  const std::string na = "plan " + std::to_string(rank_a), nb = "plan " + std::to_string(rank_b);
  return {{"ranks", {rank_a, rank_b}},
          {"step_time_s", {a.step_time_s, b.step_time_s}},
          {"peak_memory_bytes", {a.peak_memory_bytes, b.peak_memory_bytes}},
          {"time_s", time},
          {"memory_bytes", memory},
          {"time_decided_by", deciding_terms(na, nb, a.time_s, b.time_s, "s")},
          {"memory_decided_by", deciding_terms(na, nb, a.memory_bytes, b.memory_bytes, "GiB")}};
}

}  // namespace parallax
