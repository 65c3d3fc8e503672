#include "tools/training_cost.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace parallax {

Result<double> parse_token_count(const std::string& text) {
  const std::string forms = " (expected a positive count such as 15T, 1.5B, 300M, 2e12 or 4194304)";
  if (text.empty()) return Error{"--train-tokens: empty" + forms};
  double scale = 1;
  std::string digits = text;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K': scale = 1e3; break;
    case 'M': scale = 1e6; break;
    case 'B': scale = 1e9; break;
    case 'T': scale = 1e12; break;
    default: break;
  }
  if (scale != 1) digits.pop_back();
  // strtod alone would take "inf", "nan", hex and leading spaces: only digits, '.', and an exponent.
  for (char c : digits)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-')
      return Error{"--train-tokens: '" + text + "' is not a token count" + forms};
  char* end = nullptr;
  const double value = digits.empty() ? 0 : std::strtod(digits.c_str(), &end);
  if (digits.empty() || end != digits.c_str() + digits.size())
    return Error{"--train-tokens: '" + text + "' is not a token count" + forms};
  const double tokens = value * scale;
  if (!(tokens >= 1) || !std::isfinite(tokens))
    return Error{"--train-tokens: '" + text + "' must be at least one token" + forms};
  return tokens;
}

TrainingCost training_cost(double train_tokens, int64_t global_batch, int64_t seq_len, double step_time_s, int64_t gpus,
                           double usd_per_gpu_hour) {
  TrainingCost t;
  t.steps = train_tokens / (static_cast<double>(global_batch) * static_cast<double>(seq_len));
  t.days = t.steps * step_time_s / 86400.0;
  t.gpu_hours = t.days * 24.0 * static_cast<double>(gpus);
  t.cost_usd = t.gpu_hours * usd_per_gpu_hour;
  return t;
}

}  // namespace parallax
