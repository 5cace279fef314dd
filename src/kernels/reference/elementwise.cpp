#include "kernels/reference/elementwise.h"

#include <cmath>
#include <algorithm>
#include <numbers>
#include <vector>

namespace tachyon::reference {

void rms_norm(const float* x, const float* weight, int size, float eps, float* out) {
  double sum_squares = 0.0;
  for (int i = 0; i < size; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const double inverse_rms = 1.0 / std::sqrt(sum_squares / size + eps);
  for (int i = 0; i < size; ++i) out[i] = static_cast<float>(x[i] * inverse_rms * weight[i]);
}

void swiglu(const float* gate, const float* up, int64_t size, float* out) {
  for (int64_t i = 0; i < size; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void geglu(const float* gate, const float* up, int64_t size, float* out) {
  for (int64_t i = 0; i < size; ++i) {
    const double g = gate[i];
    const double u = std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g);
    out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(u)) * up[i]);
  }
}

void scaled_softmax(float* x, int64_t size, float scale) {
  double largest = x[0];
  for (int64_t i = 1; i < size; ++i) largest = std::max<double>(largest, x[i]);
  double sum = 0.0;
  std::vector<double> e(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) sum += e[i] = std::exp((x[i] - largest) * scale);
  for (int64_t i = 0; i < size; ++i) x[i] = static_cast<float>(e[i] / sum);
}

}  // namespace tachyon::reference
