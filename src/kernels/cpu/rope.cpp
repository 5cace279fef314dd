#include "kernels/cpu/rope.h"

#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {
namespace {

__attribute__((always_inline)) inline void rope_rotate_body(float* heads, int num_heads,
                                                            int head_size, const float* cos,
                                                            const float* sin, bool adjacent_pairs) {
  const int pairs = head_size / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* x = heads + h * head_size;
    if (adjacent_pairs) {
      for (int j = 0; j < pairs; ++j) {
        const float x0 = x[2 * j];
        const float x1 = x[2 * j + 1];
        x[2 * j] = x0 * cos[j] - x1 * sin[j];
        x[2 * j + 1] = x1 * cos[j] + x0 * sin[j];
      }
    } else {
      float* second = x + pairs;
      for (int j = 0; j < pairs; ++j) {
        const float x0 = x[j];
        const float x1 = second[j];
        x[j] = x0 * cos[j] - x1 * sin[j];
        second[j] = x1 * cos[j] + x0 * sin[j];
      }
    }
  }
}

}  // namespace

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kRope, void, rope_rotate,
                          (float* heads, int num_heads, int head_size, const float* cos,
                           const float* sin, bool adjacent_pairs),
                          (heads, num_heads, head_size, cos, sin, adjacent_pairs))

}  // namespace tachyon::kernels
