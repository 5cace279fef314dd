#include "kernels/reference/quantize_activations_k.h"

#include <cmath>

namespace tachyon::reference {

void quantize_row_q8_k(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < cols / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQ8KBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const bool tiny = !(amax > kQ8TinyAmax);  // also catches NaN
    const float inverse = tiny ? 0.0f : 127.0f / amax;
    d[b] = tiny ? 0.0f : amax / 127.0f;
    for (int g = 0; g < kQ8KBlock / kQ8KSumGroup; ++g) {
      int sum = 0;
      for (int j = g * kQ8KSumGroup; j < (g + 1) * kQ8KSumGroup; ++j) {
        float rounded = std::nearbyint(xb[j] * inverse);  // default mode: half to even
        if (!(rounded >= -127.0f)) rounded = -127.0f;     // NaN inputs must not reach the cast
        if (rounded > 127.0f) rounded = 127.0f;
        const int q = static_cast<int>(rounded);
        qs[b * kQ8KBlock + j] = static_cast<int8_t>(q);
        sum += q;
      }
      bsums[b * (kQ8KBlock / kQ8KSumGroup) + g] = static_cast<int16_t>(sum);
    }
  }
}

void quantize_activations_q8_k(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs,
                               float* d, int16_t* bsums) {
  const int64_t blocks = cols / kQ8KBlock;
  for (int64_t t = 0; t < num_tokens; ++t) {
    quantize_row_q8_k(x + t * cols, cols, qs + t * cols, d + t * blocks,
                      bsums + t * (cols / kQ8KSumGroup));
  }
}

}  // namespace tachyon::reference
