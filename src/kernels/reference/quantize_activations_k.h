// 8-bit quantization of f32 activations in blocks of 256 values (ggml's Q8_K layout, split into
// arrays), the activation side of the integer dot products against Q4_K/Q5_K/Q6_K weights.
//
// The math, shared bit for bit by every SIMD variant (tests compare them for equality):
//   amax = max |x| over the 256 values
//   q    = nearbyint(x * (127 / amax))  (round half to even), q in [-127, 127]
//   d    = amax / 127                    (f32, NOT rounded to f16: Q8_K keeps an f32 scale)
//   bsums[i] = sum of q over values 16i .. 16i + 15 of the block (exact, |bsum| <= 2032)
// A block with amax <= kQ8TinyAmax (zeros, denormals) gets d = 0, q = 0 and bsums = 0.
// (ggml's quantize_row_q8_K divides by the signed extreme instead; the values agree up to the
// rounding of 127 / amax, and this form keeps the 32-block code's conventions.)
#pragma once

#include <cstdint>

#include "kernels/reference/quantize_activations.h"

namespace tachyon::reference {

inline constexpr int kQ8KBlock = 256;
inline constexpr int kQ8KSumGroup = 16;  // values per entry of bsums

// A view of K-quantized activations for `num_tokens` tokens of `cols` values (cols % 256 == 0).
struct Q8KActivations {
  const int8_t* qs = nullptr;      // int8 [num_tokens, cols], each in [-127, 127]
  const float* d = nullptr;        // f32 [num_tokens, cols / 256] block scale: x ~ d * q
  const int16_t* bsums = nullptr;  // int16 [num_tokens, cols / 16] sums of 16 consecutive q
  int64_t num_tokens = 0;
  int64_t cols = 0;

  int64_t blocks_per_row() const { return cols / kQ8KBlock; }
};

// Quantizes one row. x: f32 [cols]; qs: int8 [cols]; d: f32 [cols / 256]; bsums: int16 [cols / 16].
void quantize_row_q8_k(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);

// Quantizes rows back to back. x: f32 [num_tokens, cols]; outputs as in Q8KActivations.
void quantize_activations_q8_k(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs,
                               float* d, int16_t* bsums);

}  // namespace tachyon::reference
