#include "simulator/calibration.h"

#include <cmath>

#include "models/json_fields.h"
#include "models/model_spec.h"
#include "simulator/cluster_spec.h"

namespace parallax {

const std::vector<CalParamDef>& calibration_params() {
  static const std::vector<CalParamDef> defs = {
      {CalParam::kSustainedTensor, "sustained_tensor_fraction", "1", CalKey::kPowerClass, 1.0, 0.70, 1.0,
       "multiplies every GEMM rate of GPUs of one power class, not fused attention's measured kernel rates "
       "(compute_cost.cc)",
       "the GEMM curves are microbenchmarks of a cool GPU at boost clock; under a training step's sustained "
       "load at the power cap clocks fall (H100 SXM: 1,980 MHz boost), data-dependent power draw and L2 misses "
       "cost more: no public measurement isolates it; from no loss to a 30% loss"},
      {CalParam::kFp8Gemm, "fp8_gemm_fraction", "1", CalKey::kNone, 1.0, 0.75, 1.0,
       "multiplies FP8 GEMM efficiency over bf16's at the same shape (compute_cost.cc)",
       "published FP8 GEMM ceilings are 71-81% of the FP8 peak where bf16's are ~80% of its peak "
       "(a public cuBLASLt FP8 8192^3 run: 0.81; dgx-h100.json names it)"},
      {CalParam::kGroupedGemm, "grouped_gemm_fraction", "1", CalKey::kNone, 1.0, 0.30, 1.0,
       "multiplies the rate of MoE experts' GEMMs over a dense GEMM of the same shape (compute_cost.cc)",
       "what grouped GEMMs lose beyond the weight streaming the cost model prices at few tokens per expert "
       "(grouped_gemm_time_s): ragged token counts, per-expert launches, permutes; an H200's torch._grouped_mm "
       "runs at 0.90-0.95 of a dense GEMM from 512 tokens per expert on"},
      {CalParam::kMicrobatchPassOverhead, "microbatch_pass_overhead_us", "us", CalKey::kNone, 0.0, 0.0, 3000.0,
       "added once to each micro-batch's forward and once to its backward on every stage, spread over the "
       "stage's chunks (step_costs.cc)",
       "host work the GPU waits for once per micro-batch and pass: the schedule's Python, data and P2P "
       "handshakes, stream synchronisation; not per chunk: DGX Cloud's Grok-1 proxies take the same step "
       "with 1 and 8 chunks per stage (20.64 s on 64 and 128 GPUs); about 1 ms is what earlier accuracy "
       "work could not otherwise explain"},
      {CalParam::kTpOverlapExposed, "tp_overlap_exposed", "1", CalKey::kFamily, 1.0, 0.0, 1.0,
       "multiplies the TP collective time of plans that overlap it with the GEMMs (tp_comm_overlap), per "
       "framework family (step_costs.cc)",
       "userbuffers and async TP split each GEMM to run beside its collective, never hiding more than the GEMMs "
       "last; the two are different code: Transformer Engine's userbuffers also overlap the weight gradient's "
       "all-gather and the input gradient's reduce-scatter in bulk, PyTorch's async TP fuses only the "
       "all-gather-matmul and matmul-reduce-scatter pairs the compiler finds (published step speed-ups: "
       "torchtitan 9-16% in bf16 and tensorwise FP8); 0 = fully hidden, 1 = none"},
      {CalParam::kEpOverlapExposed, "ep_overlap_exposed", "1", CalKey::kNone, 1.0, 0.0, 1.0,
       "multiplies the expert all-to-all time a pass hides beside the opposite pass of another micro-batch "
       "(execution.moe_a2a_overlap) (step_costs.cc)",
       "Megatron's 1F1B A2A overlap runs each dispatch and combine beside one block of the other pass, "
       "its kernels holding SMs (DeepEP: 20-24 of 132) the compute beside them loses; the model-zoo's "
       "Qwen3-235B EP 32 step is 11% shorter with it; 0 = fully hidden, 1 = none"},
      {CalParam::kCollectiveEfficiency, "collective_efficiency", "1", CalKey::kNone, 1.0, 0.30, 1.0,
       "multiplies the bus bandwidth of every collective and transfer, in a node and across nodes (collective_cost.cc)",
       "the cluster's busbw comes from nccl-tests on an idle machine at large messages; a training step's "
       "collectives run at the sizes and rank counts it needs, beside compute, on shared links"},
      {CalParam::kLayerGap, "layer_gap_us", "us", CalKey::kFamily, 0.0, 0.0, 2000.0,
       "added per transformer layer to every forward and backward compute op, per framework family (step_costs.cc)",
       "the GPU idles between a layer's 20-60 kernels where the host does not run far enough ahead: Python "
       "dispatch at 5-20 us per op, FSDP's per-unit copy-in/out and stream waits, allocator syncs; Megatron/TE "
       "fuses more and launches fewer"},
  };
  return defs;
}

const CalParamDef& calibration_param(CalParam p) { return calibration_params()[static_cast<size_t>(p)]; }

std::map<std::string, double>* Calibration::keyed(CalParam p) {
  switch (p) {
    case CalParam::kSustainedTensor: return &sustained_tensor;
    case CalParam::kTpOverlapExposed: return &tp_overlap_exposed;
    case CalParam::kLayerGap: return &layer_gap_us;
    default: return nullptr;
  }
}

const std::map<std::string, double>* Calibration::keyed(CalParam p) const {
  return const_cast<Calibration*>(this)->keyed(p);
}

double Calibration::value(CalParam p, const std::string& key) const {
  if (const std::map<std::string, double>* values = keyed(p)) {
    auto it = values->find(key);
    if (it == values->end()) it = values->find("*");
    return it == values->end() ? calibration_param(p).neutral : it->second;
  }
  switch (p) {
    case CalParam::kFp8Gemm: return fp8_gemm;
    case CalParam::kGroupedGemm: return grouped_gemm;
    case CalParam::kMicrobatchPassOverhead: return microbatch_pass_overhead_us;
    case CalParam::kEpOverlapExposed: return ep_overlap_exposed;
    case CalParam::kCollectiveEfficiency: return collective_efficiency;
    default: return 0;
  }
}

void Calibration::set(CalParam p, double v, const std::string& key) {
  if (std::map<std::string, double>* values = keyed(p)) {
    (*values)[key] = v;
    return;
  }
  switch (p) {
    case CalParam::kFp8Gemm: fp8_gemm = v; return;
    case CalParam::kGroupedGemm: grouped_gemm = v; return;
    case CalParam::kMicrobatchPassOverhead: microbatch_pass_overhead_us = v; return;
    case CalParam::kEpOverlapExposed: ep_overlap_exposed = v; return;
    case CalParam::kCollectiveEfficiency: collective_efficiency = v; return;
    default: return;
  }
}

Calibration::HostCost Calibration::host_cost(const std::string& framework) const {
  return {microbatch_pass_overhead_us * 1e-6, value(CalParam::kLayerGap, framework_family(framework)) * 1e-6};
}

const PredictionBand* Calibration::band(const std::string& run_class) const {
  const PredictionBand* all = nullptr;
  for (const PredictionBand& b : bands) {
    if (b.run_class == run_class) return &b;
    if (b.run_class == "all") all = &b;
  }
  return all;
}

namespace {

std::string check_range(const CalParamDef& d, double v) {
  if (std::isfinite(v) && v >= d.lo && v <= d.hi) return "";
  return std::string(d.name) + " " + std::to_string(v) + " is outside its prior range [" + std::to_string(d.lo) + ", " +
         std::to_string(d.hi) + "] " + d.unit;
}

}  // namespace

Result<Calibration> calibration_from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  Calibration c;
  c.name = f.required_string("name");
  c.source = f.required_string("source");
  const nlohmann::json& params = f.required_object("parameters");
  f.reject_unknown_keys({"bands", "runs", "fit"});
  if (!f.ok()) return Error{f.error()};
  for (const CalParamDef& d : calibration_params()) {
    if (!params.contains(d.name)) continue;
    const nlohmann::json& p = params.at(d.name);
    const std::string key = where + ": parameters." + d.name;
    if (!p.is_object() || !p.contains("value")) return Error{key + ": needs a \"value\""};
    if (d.key != CalKey::kNone && !p.at("value").is_number()) {
      if (!p.at("value").is_object()) return Error{key + ".value: must be a number or map each class to one"};
      for (const auto& [cls, v] : p.at("value").items()) {
        if (!v.is_number()) return Error{key + ".value." + cls + ": must be a number"};
        if (std::string e = check_range(d, v.get<double>()); !e.empty()) return Error{key + ": " + e};
        c.set(d.id, v.get<double>(), cls);
      }
      continue;
    }
    // A keyed parameter given one number holds it for every key.
    if (!p.at("value").is_number()) return Error{key + ".value: must be a number"};
    if (std::string e = check_range(d, p.at("value").get<double>()); !e.empty()) return Error{key + ": " + e};
    c.set(d.id, p.at("value").get<double>(), d.key == CalKey::kNone ? "" : "*");
  }
  for (const auto& [name, p] : params.items()) {
    bool known = false;
    for (const CalParamDef& d : calibration_params()) known = known || name == d.name;
    if (name == "chunk_pass_overhead_us")  // a per-chunk cost: no per-micro-batch value follows from it
      return Error{where + ": parameters: 'chunk_pass_overhead_us' is now 'microbatch_pass_overhead_us', paid once "
                           "per micro-batch pass rather than per chunk: refit with calibrate --runs"};
    if (!known) return Error{where + ": parameters: unknown parameter '" + name + "'"};
  }
  if (j.contains("bands")) {
    for (const nlohmann::json& b : j.at("bands")) {
      if (!b.is_object() || string_or_empty(b, "class").empty() || (b.contains("runs") && !b.at("runs").is_number_integer()) ||
          !b.contains("log_p10") || !b.contains("log_p90") || !b.at("log_p10").is_number() || !b.at("log_p90").is_number() ||
          b.at("log_p10") > b.at("log_p90"))
        return Error{where + ": bands: each needs class, runs, log_p10 <= log_p90"};
      c.bands.push_back({b.at("class").get<std::string>(), b.value("runs", int64_t{0}), b.at("log_p10").get<double>(),
                         b.at("log_p90").get<double>()});
    }
  }
  for (const char* key : {"runs", "fit"})
    if (j.contains(key)) c.provenance[key] = j.at(key);
  return c;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  nlohmann::json params = nlohmann::json::object();
  for (const CalParamDef& d : calibration_params()) {
    nlohmann::json v;
    if (const std::map<std::string, double>* values = c.keyed(d.id)) {
      v = nlohmann::json::object();
      for (const auto& [cls, x] : *values) v[cls] = x;
    } else {
      v = c.value(d.id);
    }
    params[d.name] = {{"value", v}, {"unit", d.unit}, {"neutral", d.neutral}, {"prior", {d.lo, d.hi}},
                      {"place", d.place}, {"prior_reason", d.reason}};
  }
  nlohmann::json j = {{"name", c.name}, {"source", c.source}, {"parameters", params}};
  nlohmann::json bands = nlohmann::json::array();
  for (const PredictionBand& b : c.bands)
    bands.push_back({{"class", b.run_class}, {"runs", b.runs}, {"log_p10", b.log_p10}, {"log_p90", b.log_p90}});
  j["bands"] = bands;
  for (const auto& [key, v] : c.provenance.items()) j[key] = v;
  return j;
}

Result<Calibration> load_calibration(const std::string& name_or_path) {
  if (std::string unknown = unknown_data_file(name_or_path, "calibrations", "calibration"); !unknown.empty())
    return Error{unknown};
  const std::string path = resolve_data_file(name_or_path, "calibrations");
  Result<nlohmann::json> j = read_json_file(path);
  if (!j.ok()) return Error{j.error()};
  return calibration_from_json(*j, path);
}

void apply_calibration(ClusterSpec& c, const Calibration& cal) {
  c.calibration = cal;
  c.gpu.sustained_tensor_fraction = cal.value(CalParam::kSustainedTensor, c.gpu.power_class);
  c.gpu.fp8_gemm_fraction = cal.fp8_gemm;
  c.gpu.grouped_gemm_fraction = cal.grouped_gemm;
}

std::optional<StepBand> step_band(const Calibration& cal, const std::string& run_class, double step_s) {
  const PredictionBand* b = cal.band(run_class);
  if (!b) return std::nullopt;
  // Predictions ran log_p10..log_p90 from the measured steps: measured = predicted / exp(residual).
  return StepBand{step_s / std::exp(b->log_p90), step_s / std::exp(b->log_p10), b->run_class, b->runs};
}

std::string framework_family(const std::string& framework) {
  const bool pytorch = framework == "fsdp" || framework == "torchtitan" || framework == "deepspeed";
  return pytorch ? "pytorch-family" : "megatron-family";
}

std::string run_class(const std::string& framework, bool moe) {
  return framework_family(framework) + (moe ? " moe" : " dense");
}

}  // namespace parallax
