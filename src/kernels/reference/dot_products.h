// Scalar dot products of one weight row (in its stored type) with one activation row: the
// oracles for the SIMD matmul kernels in kernels/cpu/.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::reference {

// A block of a legacy quant type split the way the integer kernels consume it: the weight is
// w[j] = d * q[j] + m with q an 8-bit integer (unsigned nibbles for Q4/Q5, signed for Q8_0),
// so a block's dot with Q8 activations (scale da, sum sa = da * sum(a)) is
//   d * da * sum_j(q[j] * a[j]) + m * sa.
// Q4_0 has m = -8d, Q5_0 m = -16d, Q8_0 m = 0 (products of f16 values and powers of two are
// exact in f32).
struct SplitBlock {
  int16_t q[32];
  float d;
  float m;
};

// True for the types with an integer dot against Q8 activations: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
bool has_q8_dot(DType type);
// True for the types whose rows are dotted in f32 against unquantized activations: F32, F16, BF16.
bool has_float_dot(DType type);

// Splits block `block_index` of a row of a has_q8_dot type.
SplitBlock split_block(DType type, const uint8_t* row, int64_t block_index);

// Sum over blocks in order of (d * da) * (float)isum, where isum = sum_j q[j] * a[j] is exact,
// plus, summed separately in block order, m * sa; returns acc + corr.
// row: `type` [cols]; qs: int8 [cols]; d, s: f32 [cols / 32] (see quantize_activations.h).
float dot_q8(DType type, const uint8_t* row, const int8_t* qs, const float* d, const float* s,
             int64_t cols);

// Sequential f32 sum of w[c] * x[c]. row: F32/F16/BF16 [cols]; x: f32 [cols].
float dot_float(DType type, const uint8_t* row, const float* x, int64_t cols);

// Sequential f32 sum of w[c] * x[c] for f32 w. w, x: f32 [cols].
float dot_f32(const float* w, const float* x, int64_t cols);

}  // namespace tachyon::reference
