// Which experts a token goes to, and with what weights, from its router logits: the scoring,
// selection and weighting rules of Mixtral, Qwen3-MoE and DeepSeek-V2/V3 (MixtureOfExpertsConfig).
#pragma once

#include <vector>

#include "models/model_config.h"

namespace tachyon {

class ExpertRouter {
 public:
  explicit ExpertRouter(const MixtureOfExpertsConfig& config) : config_(config) {}

  // logits: f32 [num_experts]; selection_bias: f32 [num_experts] or null.
  // experts: the chosen experts_per_token ids, ascending; weights: their weights, same order.
  void route(const float* logits, const float* selection_bias, int* experts,
             float* weights) const;

 private:
  const MixtureOfExpertsConfig& config_;
};

}  // namespace tachyon
