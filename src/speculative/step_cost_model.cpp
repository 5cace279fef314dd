#include "speculative/step_cost_model.h"

#include <algorithm>

namespace tachyon {

void StepCostModel::observe(int num_tokens, double seconds) {
  if (num_tokens < 1 || !(seconds > 0)) return;
  num_tokens = std::min(num_tokens, kMaxTokens);
  // A short memory (weight 1/8): the machine's speed drifts (other tenants, frequency).
  double& average = average_[num_tokens];
  average = count_[num_tokens] > 0 ? average + (seconds - average) / 8 : seconds;
  count_[num_tokens] = std::min(count_[num_tokens] + 1, 16);
}

double StepCostModel::local_estimate(int num_tokens) const {
  auto prior_shape = [](int n) { return std::max(1.0, n / 4.0); };
  // Weighted least squares of average against size over the measured sizes nearby; a size
  // seen c times weighs c^2, so that a size seen once barely moves a line through sizes seen
  // often.
  const int low = std::max(1, num_tokens / 2);
  const int high = std::min(kMaxTokens, 2 * num_tokens + 2);
  double weight = 0, sum_x = 0, sum_y = 0, sum_xx = 0, sum_xy = 0;
  int sizes = 0;
  for (int n = low; n <= high; ++n) {
    if (count_[n] == 0) continue;
    const double w = static_cast<double>(count_[n]) * count_[n];
    weight += w;
    sum_x += w * n;
    sum_y += w * average_[n];
    sum_xx += w * n * n;
    sum_xy += w * n * average_[n];
    ++sizes;
  }
  if (sizes >= 2) {
    const double mean_x = sum_x / weight;
    const double mean_y = sum_y / weight;
    const double slope = std::max(0.0, (sum_xy - weight * mean_x * mean_y) /
                                           (sum_xx - weight * mean_x * mean_x));
    return std::max(mean_y + slope * (num_tokens - mean_x), 1e-9);
  }
  // The nearest measured size, scaled by the prior's shape.
  int nearest = 0;
  for (int n = 1; n <= kMaxTokens; ++n) {
    if (count_[n] > 0 &&
        (nearest == 0 || std::abs(n - num_tokens) < std::abs(nearest - num_tokens))) {
      nearest = n;
    }
  }
  if (nearest == 0) return 1e-3 * prior_shape(num_tokens);
  return average_[nearest] * prior_shape(num_tokens) / prior_shape(nearest);
}

double StepCostModel::seconds(int num_tokens) const {
  // More tokens never cost less: the largest local estimate up to this size.
  const int size = std::clamp(num_tokens, 1, kMaxTokens);
  double estimate = 0;
  for (int n = 1; n <= size; ++n) estimate = std::max(estimate, local_estimate(n));
  return num_tokens > kMaxTokens ? estimate * num_tokens / kMaxTokens : estimate;
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
