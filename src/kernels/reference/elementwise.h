// Scalar oracles for kernels/cpu/elementwise.h, computed in double.
#pragma once

#include <cstdint>

namespace tachyon::reference {

void rms_norm(const float* x, const float* weight, int size, float eps, float* out);
void swiglu(const float* gate, const float* up, int64_t size, float* out);
void geglu(const float* gate, const float* up, int64_t size, float* out);
void scaled_softmax(float* x, int64_t size, float scale);

}  // namespace tachyon::reference
