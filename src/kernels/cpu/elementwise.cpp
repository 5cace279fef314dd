#include "kernels/cpu/elementwise.h"

#include <cmath>

#include "kernels/cpu/fast_exp.h"

namespace tachyon::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void rms_norm(
    const float* x, const float* weight, int size, float eps, float* out) {
  // The sum of squares in double, as llama.cpp does: long rows lose nothing to rounding.
  double sum_squares = 0.0;
  for (int i = 0; i < size; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const float inverse_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / size) + eps);
  for (int i = 0; i < size; ++i) out[i] = x[i] * inverse_rms * weight[i];
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void swiglu(const float* gate,
                                                                          const float* up,
                                                                          int64_t size,
                                                                          float* out) {
  for (int64_t i = 0; i < size; ++i) {
    // sigmoid(g) from e = exp(-|g|) <= 1, so that the branch-free exp vectorizes in every
    // clone: 1 / (1 + e) for g >= 0, e / (1 + e) below.
    const float g = gate[i];
    const float e = exp_nonpositive(g >= 0.0f ? -g : g);
    const float sigmoid = (g >= 0.0f ? 1.0f : e) / (1.0f + e);
    out[i] = g * sigmoid * up[i];
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void add_in_place(float* x,
                                                                                const float* y,
                                                                                int64_t size) {
  for (int64_t i = 0; i < size; ++i) x[i] += y[i];
}

}  // namespace tachyon::kernels
