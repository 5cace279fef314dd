#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/fast_exp.h"

namespace tachyon::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void attention_group(
    const float* queries, int group, int head_size, float scale, int num_positions,
    const float* keys_by_dimension, int64_t key_stride, const float* values, float* scores,
    float* out) {
  for (int h = 0; h < group; ++h) {
    const float* q = queries + h * head_size;
    float* row = scores + h * num_positions;
    std::fill(row, row + num_positions, 0.0f);
    for (int d = 0; d < head_size; ++d) {
      const float qd = q[d] * scale;
      const float* k = keys_by_dimension + d * key_stride;
      for (int p = 0; p < num_positions; ++p) row[p] += qd * k[p];
    }
    float max_score = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < num_positions; ++p) max_score = std::max(max_score, row[p]);
    float sum = 0.0f;
    for (int p = 0; p < num_positions; ++p) {
      row[p] = std::exp(row[p] - max_score);
      sum += row[p];
    }
    const float inverse_sum = 1.0f / sum;
    for (int p = 0; p < num_positions; ++p) row[p] *= inverse_sum;
    std::fill(out + h * head_size, out + (h + 1) * head_size, 0.0f);
  }
  // Values are read once for the whole group.
  for (int p = 0; p < num_positions; ++p) {
    const float* v = values + static_cast<int64_t>(p) * head_size;
    for (int h = 0; h < group; ++h) {
      const float weight = scores[h * num_positions + p];
      float* o = out + h * head_size;
      for (int d = 0; d < head_size; ++d) o[d] += weight * v[d];
    }
  }
}

}  // namespace tachyon::kernels

namespace tachyon::kernels {

// Register-blocked: scores are built 16 positions at a time across all dimensions, and each
// 16-wide slice of a head's output is rescaled and accumulated over all positions, so every
// partial sum stays in a register instead of going back to memory once per dimension.
__attribute__((target_clones("avx512f", "avx2", "default"))) void attention_block_update(
    const float* queries, int group, int head_size, float scale, int num_positions,
    const float* keys_by_dimension, int64_t key_stride, const float* values, float* scores,
    float* running_max, float* running_sum, float* accumulator) {
  constexpr int kLanes = 16;
  // Independent sums per inner loop: each score (and each output element) still adds its
  // terms in order, but 4 of them advance together, so the loop is not one FMA latency per
  // term (the results are the same bits as one at a time).
  constexpr int kChains = 4;
  for (int h = 0; h < group; ++h) {
    const float* q = queries + h * head_size;
    float* row = scores + h * num_positions;
    int p0 = 0;
    for (; p0 + kChains * kLanes <= num_positions; p0 += kChains * kLanes) {
      float partial[kChains][kLanes] = {};
      for (int d = 0; d < head_size; ++d) {
        const float qd = q[d] * scale;
        const float* k = keys_by_dimension + d * key_stride + p0;
        for (int c = 0; c < kChains; ++c) {
          for (int j = 0; j < kLanes; ++j) partial[c][j] += qd * k[c * kLanes + j];
        }
      }
      for (int c = 0; c < kChains; ++c) {
        for (int j = 0; j < kLanes; ++j) row[p0 + c * kLanes + j] = partial[c][j];
      }
    }
    for (; p0 < num_positions; p0 += kLanes) {
      const int lanes = num_positions - p0 < kLanes ? num_positions - p0 : kLanes;
      float partial[kLanes] = {};
      if (lanes == kLanes) {
        for (int d = 0; d < head_size; ++d) {
          const float qd = q[d] * scale;
          const float* k = keys_by_dimension + d * key_stride + p0;
          for (int j = 0; j < kLanes; ++j) partial[j] += qd * k[j];
        }
      } else {
        for (int d = 0; d < head_size; ++d) {
          const float qd = q[d] * scale;
          const float* k = keys_by_dimension + d * key_stride + p0;
          for (int j = 0; j < lanes; ++j) partial[j] += qd * k[j];
        }
      }
      for (int j = 0; j < lanes; ++j) row[p0 + j] = partial[j];
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < num_positions; ++p) block_max = std::max(block_max, row[p]);
    const float new_max = std::max(running_max[h], block_max);
    // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
    const float correction = exp_nonpositive(running_max[h] - new_max);
    float block_sum = 0.0f;
    for (int p = 0; p < num_positions; ++p) {
      row[p] = exp_nonpositive(row[p] - new_max);
      block_sum += row[p];
    }
    running_sum[h] = running_sum[h] * correction + block_sum;
    running_max[h] = new_max;

    float* acc = accumulator + h * head_size;
    int d0 = 0;
    for (; d0 + kChains * kLanes <= head_size; d0 += kChains * kLanes) {
      float slice[kChains][kLanes];
      for (int c = 0; c < kChains; ++c) {
        for (int j = 0; j < kLanes; ++j) slice[c][j] = acc[d0 + c * kLanes + j] * correction;
      }
      for (int p = 0; p < num_positions; ++p) {
        const float weight = row[p];
        const float* v = values + static_cast<int64_t>(p) * head_size + d0;
        for (int c = 0; c < kChains; ++c) {
          for (int j = 0; j < kLanes; ++j) slice[c][j] += weight * v[c * kLanes + j];
        }
      }
      for (int c = 0; c < kChains; ++c) {
        for (int j = 0; j < kLanes; ++j) acc[d0 + c * kLanes + j] = slice[c][j];
      }
    }
    for (; d0 + kLanes <= head_size; d0 += kLanes) {
      float slice[kLanes];
      for (int j = 0; j < kLanes; ++j) slice[j] = acc[d0 + j] * correction;
      for (int p = 0; p < num_positions; ++p) {
        const float weight = row[p];
        const float* v = values + static_cast<int64_t>(p) * head_size + d0;
        for (int j = 0; j < kLanes; ++j) slice[j] += weight * v[j];
      }
      for (int j = 0; j < kLanes; ++j) acc[d0 + j] = slice[j];
    }
    for (int d = d0; d < head_size; ++d) {
      float sum = acc[d] * correction;
      for (int p = 0; p < num_positions; ++p) sum += row[p] * values[static_cast<int64_t>(p) * head_size + d];
      acc[d] = sum;
    }
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void attention_finish(
    const float* accumulator, const float* running_sum, int group, int head_size, float* out) {
  for (int h = 0; h < group; ++h) {
    const float inverse_sum = 1.0f / running_sum[h];
    for (int d = 0; d < head_size; ++d) {
      out[h * head_size + d] = accumulator[h * head_size + d] * inverse_sum;
    }
  }
}

}  // namespace tachyon::kernels
