#include "models/expert_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tachyon {

void ExpertRouter::route(const float* logits, const float* selection_bias, int* experts,
                         float* weights) const {
  const int num_experts = config_.num_experts;
  const int k = config_.experts_per_token;
  // Reused per thread: routing runs token by token on the pool's threads.
  thread_local std::vector<float> scores;  // f32 [num_experts]: the weights' source
  thread_local std::vector<float> choice;  // f32 [num_experts]: what selection ranks
  thread_local std::vector<int> order;
  scores.resize(num_experts);
  choice.resize(num_experts);
  if (config_.scoring == ExpertScoring::kSoftmax) {
    const float max_logit = *std::max_element(logits, logits + num_experts);
    float sum = 0.0f;
    for (int e = 0; e < num_experts; ++e) {
      scores[e] = std::exp(logits[e] - max_logit);
      sum += scores[e];
    }
    for (int e = 0; e < num_experts; ++e) scores[e] /= sum;
  } else {
    for (int e = 0; e < num_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < num_experts; ++e) {
    choice[e] = selection_bias != nullptr ? scores[e] + selection_bias[e] : scores[e];
  }
  // Ranks by value, the lower id first among equals.
  auto by_value = [](const std::vector<float>& values) {
    return [&values](int a, int b) { return values[a] > values[b] || (values[a] == values[b] && a < b); };
  };
  if (config_.num_groups > 1) {
    // Only the best groups_used groups' experts stay eligible.
    const int per_group = num_experts / config_.num_groups;
    thread_local std::vector<float> group_scores;
    group_scores.assign(config_.num_groups, 0.0f);
    for (int g = 0; g < config_.num_groups; ++g) {
      const float* group = choice.data() + g * per_group;
      if (config_.group_score == ExpertGroupScore::kMax) {
        group_scores[g] = *std::max_element(group, group + per_group);
      } else {
        float best = -std::numeric_limits<float>::infinity();
        float second = best;
        for (int i = 0; i < per_group; ++i) {
          if (group[i] > best) {
            second = best;
            best = group[i];
          } else if (group[i] > second) {
            second = group[i];
          }
        }
        group_scores[g] = best + second;
      }
    }
    order.resize(config_.num_groups);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + config_.groups_used, order.end(),
                      by_value(group_scores));
    for (int rank = config_.groups_used; rank < config_.num_groups; ++rank) {
      std::fill_n(choice.begin() + order[rank] * per_group, per_group,
                  -std::numeric_limits<float>::infinity());
    }
  }
  order.resize(num_experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_value(choice));
  std::sort(order.begin(), order.begin() + k);
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    experts[i] = order[i];
    weights[i] = scores[order[i]];
    sum += weights[i];
  }
  const float scale = static_cast<float>(config_.weights_scale);
  for (int i = 0; i < k; ++i) {
    if (config_.normalize_weights) weights[i] /= sum + 1e-20f;
    weights[i] *= scale;
  }
}

}  // namespace tachyon
