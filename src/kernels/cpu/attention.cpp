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
