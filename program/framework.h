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

}  // namespace parallax
