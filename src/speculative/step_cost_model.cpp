#include "speculative/step_cost_model.h"

#include <algorithm>

namespace tachyon {

void StepCostModel::observe(int num_tokens, double seconds) {
  if (num_tokens < 1 || num_tokens > kMaxTokens || !(seconds > 0)) return;
  // A short memory (weight 1/8): the machine's speed drifts (other tenants, frequency).
  double& average = average_[num_tokens];
  average = seen_[num_tokens] ? average + (seconds - average) / 8 : seconds;
  seen_[num_tokens] = true;
}

double StepCostModel::seconds(int num_tokens) const {
  num_tokens = std::max(1, num_tokens);
  const int size = std::min(num_tokens, kMaxTokens);
  if (seen_[size] && num_tokens == size) return average_[size];
  // The nearest measured sizes below and above.
  int below = size;
  while (below >= 1 && !seen_[below]) --below;
  int above = size;
  while (above <= kMaxTokens && !seen_[above]) ++above;
  if (below < 1 && above > kMaxTokens) {
    return 1e-3 * std::max(1.0, num_tokens / 4.0);  // nothing measured yet: the prior's shape
  }
  if (below < 1) return average_[above];  // smaller steps cost no more than larger ones
  if (above > kMaxTokens || num_tokens > size) {
    // Past the largest measurement: no cheaper per token than there, and never cheaper than
    // the prior's proportional growth beyond 4 tokens.
    const double measured = average_[below];
    return measured * std::max(1.0, num_tokens / std::max(4.0, static_cast<double>(below)));
  }
  const double t = static_cast<double>(size - below) / (above - below);
  return average_[below] + t * (average_[above] - average_[below]);
}

std::vector<int> choose_draft_lengths(const StepCostModel& cost, int base_tokens,
                                      const std::vector<double>& acceptance,
                                      const std::vector<int>& available) {
  std::vector<int> lengths(available.size(), 0);
  double expected = base_tokens;  // tokens the step is expected to produce
  int tokens = std::max(1, base_tokens);
  for (size_t i = 0; i < available.size(); ++i) {
    const double p = std::clamp(acceptance[i], 0.0, 1.0);
    double best_rate = expected / cost.seconds(tokens);
    double gain = 0;  // p + p^2 + ... + p^k
    double power = 1;
    for (int k = 1; k <= available[i]; ++k) {
      power *= p;
      gain += power;
      const double rate = (expected + gain) / cost.seconds(tokens + k);
      if (rate > best_rate) {
        best_rate = rate;
        lengths[i] = k;
      }
    }
    // Recompute the chosen length's gain (the loop ran past it).
    double chosen_gain = 0;
    power = 1;
    for (int k = 1; k <= lengths[i]; ++k) {
      power *= p;
      chosen_gain += power;
    }
    expected += chosen_gain;
    tokens += lengths[i];
  }
  return lengths;
}

int choose_draft_model_length(const StepCostModel& target, double draft_pass_seconds,
                              int base_tokens, const std::vector<double>& acceptance,
                              int max_tokens) {
  const int drafting = static_cast<int>(acceptance.size());
  const int base = std::max(1, base_tokens);
  if (drafting == 0) return 0;
  double best_rate = base_tokens / target.seconds(base);
  int best = 0;
  std::vector<double> power(acceptance.size(), 1.0);
  double gain = 0;  // Σ over sequences of p + p^2 + ... + p^k
  for (int k = 1; k <= max_tokens; ++k) {
    for (size_t i = 0; i < acceptance.size(); ++i) {
      power[i] *= std::clamp(acceptance[i], 0.0, 1.0);
      gain += power[i];
    }
    const double seconds = target.seconds(base + drafting * k) + k * draft_pass_seconds;
    const double rate = (base_tokens + gain) / seconds;
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

}  // namespace tachyon
