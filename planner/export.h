// Exporters: a plan and its estimate as Parallax JSON (the results contract of DESIGN.md), as
// Megatron-LM command-line arguments, or as a DeepSpeed configuration. A plan a framework cannot
// express (e.g. ZeRO-3 in Megatron-LM) is an error naming the setting, never a silent change.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "planner/estimate.h"
#include "program/framework.h"
#include "program/plan.h"

namespace parallax {

// The plan's fields plus params_total, memory_bytes{...}, peak_memory_bytes, step_time_s, ...
nlohmann::json evaluation_to_json(const ModelSpec& m, const Plan& plan, const StepReport& e);

// Megatron-LM arguments on one line (so that $(planner --emit megatron) splits into exactly them);
// DP follows from the world size. Beside the shape: the router (score function, pre-softmax,
// top-k scaling, group-limited routing, expert bias, balancing loss), rotary scaling and MTP depth
// of ModelSpec::Recipe, and the gradient dtype the plan was priced with (export_megatron.cc).
Result<std::string> megatron_arguments(const ModelSpec& m, const Plan& plan);
// (Megatron's model rules, megatron_model_refusal, are in program/framework.h.)
// What a DeepSpeed run needs beyond its config (the PipelineModule and its topology, TP groups,
// checkpointing calls in the model), one line each; the planner prints them on stderr.
std::vector<std::string> deepspeed_notes(const Plan& plan);
// The config (export_deepspeed.cc); a plan DeepSpeed cannot run as priced is an error naming why.
Result<nlohmann::json> deepspeed_config(const Plan& plan);

}  // namespace parallax
