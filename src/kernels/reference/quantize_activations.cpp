#include "kernels/reference/quantize_activations.h"

#include <cmath>

#include "core/half.h"

namespace tachyon::reference {

void quantize_row_q8(const float* x, int64_t cols, int8_t* qs, float* d, float* s) {
  for (int64_t b = 0; b < cols / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const bool tiny = !(amax > kQ8TinyAmax);  // also catches NaN
    const float inverse = tiny ? 0.0f : 127.0f / amax;
    const float scale = tiny ? 0.0f : amax / 127.0f;
    int sum = 0;
    for (int j = 0; j < kQ8Block; ++j) {
      float rounded = std::nearbyint(xb[j] * inverse);  // default mode: half to even
      if (!(rounded >= -127.0f)) rounded = -127.0f;     // NaN inputs must not reach the cast
      if (rounded > 127.0f) rounded = 127.0f;
      const int q = static_cast<int>(rounded);
      qs[b * kQ8Block + j] = static_cast<int8_t>(q);
      sum += q;
    }
    d[b] = round_to_f16(scale);
    s[b] = round_to_f16(scale * static_cast<float>(sum));
  }
}

void quantize_activations_q8(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs, float* d,
                             float* s) {
  const int64_t blocks = cols / kQ8Block;
  for (int64_t t = 0; t < num_tokens; ++t) {
    quantize_row_q8(x + t * cols, cols, qs + t * cols, d + t * blocks, s + t * blocks);
  }
}

}  // namespace tachyon::reference
