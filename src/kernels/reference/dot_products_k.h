// Scalar dot products of one K-quant weight row (Q4_K, Q5_K, Q6_K) with one row of activations
// quantized to 256-value blocks (quantize_activations_k.h): the oracles for the SIMD K-quant
// kernels in kernels/cpu/.
//
// Per super-block of 256 values, with activation scale da and 16-value sums bsums:
//   Q4_K/Q5_K (w = (d*sc_j) q - (dmin*m_j), 8 sub-blocks j of 32):
//     isum = sum_j sc_j * sum_{i in j} q_i a_i                    (exact int32)
//     msum = sum_j m_j * (bsums[2j] + bsums[2j+1])                (exact int32)
//     acc  = acc + (d * da) * isum;  acc = acc - (dmin * da) * msum
//   Q6_K (w = (d*sc_j) (q - 32), 16 sub-blocks j of 16, sc_j signed):
//     isum = sum_j sc_j * (sum_{i in j} q_i a_i - 32 * bsums[j])  (exact int32)
//     acc  = acc + (d * da) * isum
// The SIMD kernels compute the same integers, split over 8 lanes, and the same f32 products;
// only the order of the f32 additions differs.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tachyon::reference {

// True for the types with an integer dot against 256-block activations: Q4_K, Q5_K, Q6_K.
bool has_q8_k_dot(DType type);

// row: `type` [cols]; qs: int8 [cols]; d: f32 [cols / 256]; bsums: int16 [cols / 16].
float dot_q8_k(DType type, const uint8_t* row, const int8_t* qs, const float* d,
               const int16_t* bsums, int64_t cols);

}  // namespace tachyon::reference
