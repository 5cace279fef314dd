// Row conversions between f32 and the KV cache's storage types: f16, using F16C when the CPU
// has it (the scalar fallback in core/half.h is bit-identical, round to nearest even), and
// 8-bit (q8).
#pragma once

#include <cstdint>

namespace tachyon::kernels {

// dst: f16 bits [n]; src: f32 [n]
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
// dst: f32 [n]; src: f16 bits [n]
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);

// 8-bit storage, llama.cpp's q8_0 arithmetic with the scales kept apart from the values: each
// run of kQ8Group values x as int8 q with one f16 scale d = max|x| / 127, q = round(x / d)
// (halves away from zero), read back as q * d: an exact product in f32, so a kernel that widens
// q8 as it loads gets the same bits as one fed the widened rows.
inline constexpr int kQ8Group = 32;
// dst: int8 [n]; scales: f16 bits [n / kQ8Group]; src: f32 [n]; n a multiple of kQ8Group.
void f32_to_q8_row(const float* src, int8_t* dst, uint16_t* scales, int64_t n);
// dst: f32 [n]; the inverse layout.
void q8_to_f32_row(const int8_t* src, const uint16_t* scales, float* dst, int64_t n);

}  // namespace tachyon::kernels
