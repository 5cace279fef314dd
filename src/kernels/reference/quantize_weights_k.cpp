// f32 weights to Q4_K and Q6_K super-blocks of 256 values, by the algorithm of ggml's reference
// quantizers (quantize_row_q4_K_ref / quantize_row_q6_K_ref: each sub-block's scale (and min)
// fitted by a small weighted search, the sub-block scales then quantized against the
// super-block's), which is what llama.cpp's quantizer runs without an importance matrix. The
// PyPI gguf package has no K-quant quantizer; llama.cpp's own output is the check
// (tests/golden/quantizers_k). Built with -ffp-contract=off: every step rounded on its own.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "kernels/reference/block_layouts.h"
#include "kernels/reference/quantize_weights.h"

namespace tachyon::reference {
namespace {

constexpr int kSuper = kQkK;  // 256 values per super-block

// Round to nearest, ties to even, as ggml's nearest_int (valid for |value| < 2^22).
int nearest(float value) { return static_cast<int>(std::nearbyint(value)); }

// Q4_K's sub-block fit: levels 0..top of `n` values as scale * level - offset (offset >= 0),
// starting from the min..max grid, then trying 21 slightly different grids and keeping the
// weighted least-squares fit with the smallest weighted squared error. Returns the scale,
// writes the levels and the offset.
float fit_scale_and_offset(const float* x, const float* weights, int n, int top, uint8_t* levels,
                           float& offset) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill_n(levels, n, 0);
    offset = -min;
    return 0.0f;
  }
  float inverse = static_cast<float>(top) / (max - min);
  float scale = 1.0f / inverse;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    levels[i] = static_cast<uint8_t>(std::clamp(nearest(inverse * (x[i] - min)), 0, top));
    const float diff = scale * levels[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t trial[32];
  for (int step = 0; step <= 20; ++step) {
    inverse = (-1.0f + 0.1f * step + static_cast<float>(top)) / (max - min);
    float sum_l = 0.0f;
    float sum_l2 = 0.0f;
    float sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(inverse * (x[i] - min)), 0, top);
      trial[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float determinant = sum_w * sum_l2 - sum_l * sum_l;
    if (!(determinant > 0)) continue;
    float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / determinant;
    float trial_min = (sum_l2 * sum_x - sum_l * sum_xl) / determinant;
    if (trial_min > 0) {
      trial_min = 0;
      trial_scale = sum_xl / sum_l2;
    }
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = trial_scale * trial[i] + trial_min - x[i];
      error += weights[i] * (diff * diff);
    }
    if (error < best_error) {
      std::copy_n(trial, n, levels);
      best_error = error;
      scale = trial_scale;
      min = trial_min;
    }
  }
  offset = -min;
  return scale;
}

void quantize_q4_k(const float* x, uint8_t* out) {
  BlockQ4_K block{};
  float scales[8];
  float offsets[8];
  uint8_t levels[kSuper];
  float max_scale = 0.0f;
  float max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* sub = x + 32 * j;
    // Each value weighted by its magnitude plus the sub-block's RMS.
    float sum_squares = 0.0f;
    for (int l = 0; l < 32; ++l) sum_squares += sub[l] * sub[l];
    const float rms = std::sqrt(sum_squares / 32);
    float weights[32];
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(sub[l]);
    scales[j] = fit_scale_and_offset(sub, weights, 32, 15, levels + 32 * j, offsets[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_offset = std::max(max_offset, offsets[j]);
  }
  // Six-bit sub-block scales and offsets against the super-block's.
  const float inverse_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inverse_offset = max_offset > 0 ? 63.0f / max_offset : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, nearest(inverse_scale * scales[j]) & 0xff));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, nearest(inverse_offset * offsets[j]) & 0xff));
    if (j < 4) {
      block.scales[j] = ls;
      block.scales[j + 4] = lm;
    } else {
      block.scales[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
      block.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      block.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  block.d = f32_to_f16(max_scale / 63.0f);
  block.dmin = f32_to_f16(max_offset / 63.0f);
  // The levels again against the scales as stored.
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = q4_k_scale_min(block.scales, j);
    const float d = f16_to_f32(block.d) * sm.scale;
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(block.dmin) * sm.min;
    for (int l = 0; l < 32; ++l) {
      levels[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest((x[32 * j + l] + dm) / d), 0, 15));
    }
  }
  // Value 64c + 32s + l is nibble s of qs[32c + l].
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      block.qs[32 * c + l] =
          static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
    }
  }
  std::memcpy(out, &block, sizeof(block));
}

// Q6_K's sub-block fit: signed levels -32..31 of 16 values as scale * level, searching 19
// grids around the largest magnitude for the best x²-weighted least-squares scale.
float fit_signed_scale(const float* x, int8_t* levels) {
  constexpr int kTop = 32;
  float max = 0.0f;
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill_n(levels, 16, 0);
    return 0.0f;
  }
  auto fit = [&](float inverse, float& sum_lx, float& sum_l2) {
    sum_lx = 0.0f;
    sum_l2 = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const int l = std::clamp(nearest(inverse * x[i]), -kTop, kTop - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
  };
  auto set_levels = [&](float inverse) {
    for (int i = 0; i < 16; ++i) {
      levels[i] = static_cast<int8_t>(kTop + std::clamp(nearest(inverse * x[i]), -kTop, kTop - 1));
    }
  };
  float inverse = -kTop / max;
  float sum_lx;
  float sum_l2;
  fit(inverse, sum_lx, sum_l2);
  set_levels(inverse);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inverse = -(kTop + 0.1f * step) / max;
    fit(inverse, sum_lx, sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      set_levels(inverse);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

void quantize_q6_k(const float* x, uint8_t* out) {
  BlockQ6_K block{};
  int8_t levels[kSuper];
  float scales[16];
  float max_scale = 0.0f;
  float max_abs_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_signed_scale(x + 16 * s, levels + 16 * s);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  if (max_abs_scale < 1e-15f) {
    block.d = f32_to_f16(0.0f);
    std::memcpy(out, &block, sizeof(block));
    return;
  }
  const float inverse = -128.0f / max_scale;
  block.d = f32_to_f16(1.0f / inverse);
  for (int s = 0; s < 16; ++s) {
    block.scales[s] = static_cast<int8_t>(std::min(127, nearest(inverse * scales[s])));
  }
  for (int s = 0; s < 16; ++s) {
    const float d = f16_to_f32(block.d) * block.scales[s];
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      levels[16 * s + i] =
          static_cast<int8_t>(32 + std::clamp(nearest(x[16 * s + i] / d), -32, 31));
    }
  }
  // Low nibbles: value 128h + 64s + l is nibble s of ql[64h + l]; high 2 bits: value
  // 128h + 32s + l is bits 2s..2s+1 of qh[32h + l].
  for (int h = 0; h < 2; ++h) {
    const int8_t* v = levels + 128 * h;
    for (int l = 0; l < 32; ++l) {
      block.ql[64 * h + l] = static_cast<uint8_t>((v[l] & 0x0f) | ((v[l + 64] & 0x0f) << 4));
      block.ql[64 * h + 32 + l] =
          static_cast<uint8_t>((v[l + 32] & 0x0f) | ((v[l + 96] & 0x0f) << 4));
      block.qh[32 * h + l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) |
                                                  ((v[l + 64] >> 4) << 4) |
                                                  ((v[l + 96] >> 4) << 6));
    }
  }
  std::memcpy(out, &block, sizeof(block));
}

}  // namespace

void quantize_k_super_blocks(DType type, const float* src, int64_t num_blocks, uint8_t* dst) {
  const size_t block_bytes = dtype_info(type).block_bytes;
  for (int64_t b = 0; b < num_blocks; ++b) {
    if (type == DType::kQ4_K) {
      quantize_q4_k(src + b * kSuper, dst + b * block_bytes);
    } else {
      quantize_q6_k(src + b * kSuper, dst + b * block_bytes);
    }
  }
}

}  // namespace tachyon::reference
