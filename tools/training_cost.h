// "How long and how much?": the wall-clock days, GPU-hours and (given a price) dollars of training
// on a number of tokens at a plan's predicted step time. Steps are fractional (train_tokens over
// tokens per step), as the question is the scale of a run, not its last partial step.
#pragma once

#include <cstdint>
#include <string>

#include "models/status.h"

namespace parallax {

// "15T", "1.5B", "300b", "2e12", "4194304": a positive token count. Suffixes K, M, B, T (either
// case) are powers of 1000. Errors name the text and the accepted forms.
Result<double> parse_token_count(const std::string& text);

struct TrainingCost {
  double steps = 0;
  double days = 0;       // steps x step_time_s / 86,400
  double gpu_hours = 0;  // days x 24 x gpus
  double cost_usd = 0;   // gpu_hours x price; 0 without a price
};

// days = train_tokens / (global_batch x seq_len) x step_time_s / 86,400; GPU-hours = days x 24 x
// gpus; cost = GPU-hours x usd_per_gpu_hour.
TrainingCost training_cost(double train_tokens, int64_t global_batch, int64_t seq_len, double step_time_s, int64_t gpus,
                           double usd_per_gpu_hour);

}  // namespace parallax
