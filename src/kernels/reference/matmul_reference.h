// Scalar matmul with the same contract and math as kernels::matmul (kernels/cpu/matmul.h):
// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights take Q8-quantized activations and dot_q8; Q4_K/Q5_K/Q6_K
// take 256-block activations (quantize_activations_k.h) and dot_q8_k; F32/F16/BF16
// weights use dot_float; every other dequantizable type is dequantized row by row to f32 and
// dotted with dot_f32 against the unquantized activations.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon::reference {

// y[t][r] = sum_c w[r][c] * x[t][c].
// w: `type` [rows, cols] (rows back to back); x: f32 [num_tokens, cols]; y: f32 [num_tokens, rows].
Status matmul(DType type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
              int64_t num_tokens, float* y);

}  // namespace tachyon::reference
