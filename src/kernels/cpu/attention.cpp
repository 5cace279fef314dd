#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

__attribute__((target_clones("avx512f", "avx2", "default"))) void attention_block_update(
    const float* queries, int group, int head_size, float scale, int num_positions,
    const float* keys_by_dimension, int64_t key_stride, const float* values, float* scores,
    float* running_max, float* running_sum, float* accumulator) {
  for (int h = 0; h < group; ++h) {
    const float* q = queries + h * head_size;
    float* row = scores + h * num_positions;
    std::fill(row, row + num_positions, 0.0f);
    for (int d = 0; d < head_size; ++d) {
      const float qd = q[d] * scale;
      const float* k = keys_by_dimension + d * key_stride;
      for (int p = 0; p < num_positions; ++p) row[p] += qd * k[p];
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < num_positions; ++p) block_max = std::max(block_max, row[p]);
    const float new_max = std::max(running_max[h], block_max);
    // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
    const float correction = std::exp(running_max[h] - new_max);
    float block_sum = 0.0f;
    for (int p = 0; p < num_positions; ++p) {
      row[p] = std::exp(row[p] - new_max);
      block_sum += row[p];
    }
    running_sum[h] = running_sum[h] * correction + block_sum;
    running_max[h] = new_max;
    float* acc = accumulator + h * head_size;
    for (int d = 0; d < head_size; ++d) acc[d] *= correction;
  }
  // Values are read once for the whole group.
  for (int p = 0; p < num_positions; ++p) {
    const float* v = values + static_cast<int64_t>(p) * head_size;
    for (int h = 0; h < group; ++h) {
      const float weight = scores[h * num_positions + p];
      float* acc = accumulator + h * head_size;
      for (int d = 0; d < head_size; ++d) acc[d] += weight * v[d];
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
