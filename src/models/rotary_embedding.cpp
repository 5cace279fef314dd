#include "models/rotary_embedding.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/rope.h"

namespace tachyon {

RotaryEmbedding::RotaryEmbedding(const RopeConfig& config,
                                 std::span<const float> frequency_factors)
    : layout_(config.layout), dimensions_(config.dimensions) {
  const int pairs = dimensions_ / 2;
  inverse_frequencies_.resize(pairs);
  for (int j = 0; j < pairs; ++j) {
    // theta^(-2j/D), computed in f32 as Hugging Face does.
    inverse_frequencies_[j] =
        1.0f / std::pow(static_cast<float>(config.freq_base), static_cast<float>(2 * j) / dimensions_);
  }
  const float factor = static_cast<float>(config.scaling_factor);
  switch (config.scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kLlama3: break;
    case RopeScaling::kLinear:
      for (float& frequency : inverse_frequencies_) frequency /= factor;
      break;
    case RopeScaling::kYarn: {
      // Dimensions that rotate fewer than beta_slow times over the original context are
      // interpolated (divided by the factor), those rotating more than beta_fast times are kept,
      // with a linear ramp between; attention is sharpened by m = 0.1 ln(factor) + 1.
      const double base = config.freq_base;
      const double original = config.original_context_length;
      auto correction_dimension = [&](double rotations) {
        return dimensions_ * std::log(original / (rotations * 2 * std::numbers::pi)) /
               (2 * std::log(base));
      };
      const double low = std::max(0.0, std::floor(correction_dimension(config.yarn_beta_fast)));
      double high = std::min(static_cast<double>(dimensions_ - 1),
                             std::ceil(correction_dimension(config.yarn_beta_slow)));
      if (high == low) high += 0.001;
      for (int j = 0; j < pairs; ++j) {
        const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
        const float interpolated = inverse_frequencies_[j] / factor;
        inverse_frequencies_[j] = static_cast<float>(interpolated * ramp +
                                                     inverse_frequencies_[j] * (1.0 - ramp));
      }
      attention_factor_ = static_cast<float>(config.yarn_attention_factor >= 0
                                                 ? config.yarn_attention_factor
                                                 : 0.1 * std::log(config.scaling_factor) + 1.0);
      break;
    }
  }
  frequency_factors_.assign(pairs, 1.0f);
  if (!frequency_factors.empty()) {
    for (int j = 0; j < pairs && j < static_cast<int>(frequency_factors.size()); ++j) {
      inverse_frequencies_[j] /= frequency_factors[j];
      frequency_factors_[j] = frequency_factors[j];
    }
  }
  // YaRN's ramp is computed per pair above; the other schemes are a power series.
  use_frequency_powers_ = config.scaling != RopeScaling::kYarn;
  frequency_ratio_ = std::pow(static_cast<float>(config.freq_base), -2.0f / dimensions_);
  frequency_scale_ = config.scaling == RopeScaling::kLinear ? 1.0f / factor : 1.0f;
}

void RotaryEmbedding::compute_angles(std::span<const int> positions, std::vector<float>& cos_out,
                                     std::vector<float>& sin_out) const {
  const size_t pairs = inverse_frequencies_.size();
  cos_out.resize(positions.size() * pairs);
  sin_out.resize(positions.size() * pairs);
  for (size_t t = 0; t < positions.size(); ++t) {
    float* cos_row = cos_out.data() + t * pairs;
    float* sin_row = sin_out.data() + t * pairs;
    if (use_frequency_powers_) {
      // As llama.cpp computes them (pos · base^(-2j/D) by repeated f32 multiplication, then
      // f32 cos/sin), so that both engines see the same bits: with 8-bit activations a last-bit
      // difference can flip a rounding and grow. Within 1e-6 of the exact angles.
      float theta = static_cast<float>(positions[t]);
      for (size_t j = 0; j < pairs; ++j) {
        const float angle = frequency_scale_ * (theta / frequency_factors_[j]);
        cos_row[j] = std::cos(angle) * attention_factor_;
        sin_row[j] = std::sin(angle) * attention_factor_;
        theta *= frequency_ratio_;
      }
      continue;
    }
    for (size_t j = 0; j < pairs; ++j) {
      const float angle = static_cast<float>(positions[t]) * inverse_frequencies_[j];
      cos_row[j] = std::cos(angle) * attention_factor_;
      sin_row[j] = std::sin(angle) * attention_factor_;
    }
  }
}

void RotaryEmbedding::rotate(float* heads, int num_heads, const float* cos_row,
                             const float* sin_row) const {
  kernels::rope_rotate(heads, num_heads, dimensions_, cos_row, sin_row,
                       layout_ == RopeLayout::kAdjacentPairs);
}

}  // namespace tachyon
