// 8-bit floats as DeepSeek-V3 and Kimi-K2 ship their weights (safetensors F8_E4M3, with one f32
// scale per 128x128 block in `weight_scale_inv`), and F8_E5M2: exact decoding to f32, and the
// block-scaled dequantization the models' own code does (each value times its block's scale,
// one f32 multiply).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace tachyon::reference {

// E4M3 "fn" (OCP FP8): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
// S.1111.111 is NaN; largest finite 448; exponent 0 is subnormal (m/8 * 2^-6).
float fp8_e4m3_to_f32(uint8_t bits);
// E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits; IEEE-style infinities and NaNs.
float fp8_e5m2_to_f32(uint8_t bits);

// out[r][c] = f32(weights[r][c]) * scale_inv[r / block][c / block]: weights E4M3
// [rows, cols] row-major, scale_inv f32 [ceil(rows / block), ceil(cols / block)] (the last
// blocks may be partial). `scale_rows` and `scale_cols` are the scale tensor's shape as the
// file gives it; a shape that does not cover the weights is an error naming both.
Status dequantize_fp8_e4m3_blocks(const uint8_t* weights, int64_t rows, int64_t cols,
                                  const float* scale_inv, int64_t scale_rows, int64_t scale_cols,
                                  int64_t block, float* out);

}  // namespace tachyon::reference
