// Row conversions between f32 and f16 (the KV cache's storage type), using F16C when the CPU
// has it; the scalar fallback in core/half.h is bit-identical (round to nearest even).
#pragma once

#include <cstdint>

namespace tachyon::kernels {

// dst: f16 bits [n]; src: f32 [n]
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
// dst: f32 [n]; src: f16 bits [n]
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);

}  // namespace tachyon::kernels
