// Rotary position embedding (RoPE): rotates pairs of query/key dimensions by an angle that
// grows with the token's position, at one frequency per pair.
#pragma once

#include <span>
#include <vector>

#include "models/model_config.h"

namespace tachyon {

class RotaryEmbedding {
 public:
  // `frequency_factors` (llama3's rope_freqs.weight, f32 [dimensions/2]) divide the
  // frequencies; empty when the model has none.
  RotaryEmbedding(const RopeConfig& config, std::span<const float> frequency_factors);

  // cos and sin of every pair's angle for each position: f32 [positions.size(), dimensions/2]
  // each, already multiplied by the attention factor (YaRN's m, else 1).
  void compute_angles(std::span<const int> positions, std::vector<float>& cos_out,
                      std::vector<float>& sin_out) const;

  // Rotates `num_heads` vectors of `dimensions` floats laid out back to back (one token),
  // with that token's row of cos/sin.
  void rotate(float* heads, int num_heads, const float* cos_row, const float* sin_row) const;

  const std::vector<float>& inverse_frequencies() const { return inverse_frequencies_; }
  float attention_factor() const { return attention_factor_; }

 private:
  RopeLayout layout_;
  int dimensions_;
  std::vector<float> inverse_frequencies_;  // f32 [dimensions/2], after scaling
  float attention_factor_ = 1.0f;
  // Angles as a power series (every scheme but YaRN): pos · ratio^j · scale / factor[j].
  bool use_frequency_powers_ = true;
  float frequency_ratio_ = 1.0f;          // base^(-2/D)
  float frequency_scale_ = 1.0f;          // 1/factor for linear scaling
  std::vector<float> frequency_factors_;  // f32 [dimensions/2], llama3's divisors (else 1)
};

}  // namespace tachyon
