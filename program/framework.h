// Framework profiles: the execution settings a training framework uses by default (attention
// kernel, kernel fusion, what selective recompute re-runs, which communication overlaps compute,
// the gradient-reduction dtype), each with the framework source that sets it. A prediction is made
// for a plan *as a framework runs it*; `--framework` and a plan's `execution.framework` pick the
// profile, and explicit execution keys override it.
#pragma once

#include <string>
#include <vector>

#include "models/status.h"
#include "program/plan.h"

namespace parallax {

struct FrameworkSetting {
  std::string key;     // the Execution key, or a behaviour Parallax does not model (noted so)
  std::string value;
  std::string source;  // repository@commit:file, or the paper, that sets it
};

struct FrameworkProfile {
  std::string name;
  std::string description;
  Execution execution;  // the settings below applied to Parallax's defaults
  std::vector<FrameworkSetting> settings;
};

// Names of the bundled profiles: megatron, megatron-2022, nemo, deepspeed, fsdp, torchtitan.
std::vector<std::string> framework_names();
// The profile called `name`, or an error naming the known ones.
Result<FrameworkProfile> framework_profile(const std::string& name);

// Why `framework` cannot run `plan`, as one line ("megatron runs ZeRO 0 or 1 ..."), or "" when it
// can (also for "", Parallax's defaults). What a framework's exporter writes is what it runs:
// planner --framework lists only plans its --emit can express.
std::string framework_refusal(const std::string& framework, const Plan& plan, const ModelSpec& model);

// Why Megatron-LM's command line cannot express the model (a gated GELU, parallel attention and
// MLP, sandwich norms, q/k norms over whole projections, rope scaling other than Llama 3's or a
// whole linear factor, biases on some linears only, ...), one line; "" when it can
// (program/megatron_model.cc). framework_refusal gives it for megatron, megatron-2022 and nemo,
// and planner/export_megatron.cc refuses --emit megatron with it.
std::string megatron_model_refusal(const ModelSpec& m);

}  // namespace parallax
