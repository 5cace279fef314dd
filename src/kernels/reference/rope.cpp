#include "kernels/reference/rope.h"

namespace tachyon::reference {

void rope_rotate(float* heads, int num_heads, int head_size, const float* cos, const float* sin,
                 bool adjacent_pairs) {
  const int pairs = head_size / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* x = heads + h * head_size;
    for (int j = 0; j < pairs; ++j) {
      const int a = adjacent_pairs ? 2 * j : j;
      const int b = adjacent_pairs ? 2 * j + 1 : j + pairs;
      const double x0 = x[a];
      const double x1 = x[b];
      x[a] = static_cast<float>(x0 * cos[j] - x1 * sin[j]);
      x[b] = static_cast<float>(x1 * cos[j] + x0 * sin[j]);
    }
  }
}

}  // namespace tachyon::reference
