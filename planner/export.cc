// Parallax's own export: a plan and its estimate as JSON. The framework exporters are
// export_megatron.cc and export_deepspeed.cc.
#include "planner/export.h"

#include <cmath>

namespace parallax {

namespace {
int64_t whole_bytes(double bytes) { return std::isfinite(bytes) && bytes < 9e18 ? std::llround(bytes) : -1; }
}  // namespace

nlohmann::json evaluation_to_json(const ModelSpec& m, const Plan& plan, const StepReport& e) {
  nlohmann::json j = plan_to_json(plan);
  j["gpus"] = plan.gpus();
  j["micro_batches"] = plan.micro_batches();
  j["params_total"] = total_params(m);
  const MemoryBreakdown& mem = e.memory;
  j["memory_bytes"] = {{"weights", whole_bytes(mem.weights)},     {"gradients", whole_bytes(mem.gradients)},
                       {"optimizer", whole_bytes(mem.optimizer)}, {"activations", whole_bytes(mem.activations)},
                       {"buffers", whole_bytes(mem.buffers)},     {"margin", whole_bytes(mem.margin)},
                       {"host", whole_bytes(mem.host)}};
  j["peak_memory_bytes"] = whole_bytes(e.peak_memory_bytes);
  j["fits_in_memory"] = e.fits_in_memory;
  j["fits_in_host_memory"] = e.fits_in_host_memory;
  j["step_time_s"] = e.step_time_s;
  j["time_breakdown_s"] = {{"pipeline", e.pipeline_s},     {"dp_exposed", e.dp_exposed_s},
                           {"optimizer", e.optimizer_s},   {"overhead", e.overhead_s},
                           {"tp_on_critical_path", e.tp_exposed_s}};
  j["tokens_per_s"] = e.tokens_per_s;
  j["mfu"] = e.mfu;
  j["model_tflops_per_gpu"] = e.model_tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = e.hardware_tflops_per_gpu;
  j["hfu"] = e.hfu;
  j["flops_convention"] = e.flops_convention;  // MFU's model FLOPs; hardware FLOPs are as executed
  j["bubble_fraction"] = e.bubble_fraction;
  j["comm_bytes_per_gpu"] = {{"tp", whole_bytes(e.comm_bytes_per_gpu.tp)},
                             {"pp", whole_bytes(e.comm_bytes_per_gpu.pp)},
                             {"dp", whole_bytes(e.comm_bytes_per_gpu.dp)},
                             {"cp", whole_bytes(e.comm_bytes_per_gpu.cp)},
                             {"ep", whole_bytes(e.comm_bytes_per_gpu.ep)}};
  j["bytes_per_gpu_by_tier"] = {{"nvlink", whole_bytes(e.tier_bytes_per_gpu.nvlink)},
                                {"network", whole_bytes(e.tier_bytes_per_gpu.network)}};
  return j;
}

}  // namespace parallax
