#include "kernels/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tachyon::reference {

void attention_group(const float* queries, int group, int head_size, float scale,
                     int num_positions, const float* keys, const float* values, float* out) {
  std::vector<double> scores(num_positions);
  for (int h = 0; h < group; ++h) {
    const float* q = queries + static_cast<int64_t>(h) * head_size;
    double max_score = -INFINITY;
    for (int p = 0; p < num_positions; ++p) {
      double dot = 0.0;
      for (int d = 0; d < head_size; ++d) {
        dot += static_cast<double>(q[d]) * keys[static_cast<int64_t>(p) * head_size + d];
      }
      scores[p] = dot * scale;
      max_score = std::max(max_score, scores[p]);
    }
    double sum = 0.0;
    for (int p = 0; p < num_positions; ++p) {
      scores[p] = std::exp(scores[p] - max_score);
      sum += scores[p];
    }
    for (int d = 0; d < head_size; ++d) {
      double weighted = 0.0;
      for (int p = 0; p < num_positions; ++p) {
        weighted += scores[p] * values[static_cast<int64_t>(p) * head_size + d];
      }
      out[static_cast<int64_t>(h) * head_size + d] = static_cast<float>(weighted / sum);
    }
  }
}

}  // namespace tachyon::reference
