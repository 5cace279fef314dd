// 8-bit quantization of f32 activations in blocks of 32 values, the activation side of the
// integer dot products against Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights (llama.cpp's Q8 trick).
//
// The math, shared bit for bit by every SIMD variant (tests compare them for equality), and the
// same as ggml's x86 quantize_row_q8_0/q8_1, so that results match llama.cpp's:
//   amax = max |x| over the block
//   q    = nearbyint(x * (127 / amax))  (round half to even), q in [-127, 127]
//   d    = f16(amax / 127),  s = f16(amax / 127 * sum(q))   (rounded to half precision)
// A block with amax <= kQ8TinyAmax (zeros, denormals) gets d = s = 0 and q = 0, so 127 / amax
// never overflows. The scales are stored as f32 values that a half can hold.
#pragma once

#include <cstdint>

namespace tachyon::reference {

inline constexpr int kQ8Block = 32;
inline constexpr float kQ8TinyAmax = 1e-30f;

// A view of quantized activations for `num_tokens` tokens of `cols` values (cols % 32 == 0).
struct Q8Activations {
  const int8_t* qs = nullptr;  // int8 [num_tokens, cols], each in [-127, 127]
  const float* d = nullptr;    // f32 [num_tokens, cols / 32] block scale: x ~ d * q
  const float* s = nullptr;    // f32 [num_tokens, cols / 32] d * sum(q), for weights with an offset
  int64_t num_tokens = 0;
  int64_t cols = 0;

  int64_t blocks_per_row() const { return cols / kQ8Block; }
};

// Quantizes one row. x: f32 [cols]; qs: int8 [cols]; d, s: f32 [cols / 32].
void quantize_row_q8(const float* x, int64_t cols, int8_t* qs, float* d, float* s);

// Quantizes rows back to back. x: f32 [num_tokens, cols]; outputs as in Q8Activations.
void quantize_activations_q8(const float* x, int64_t num_tokens, int64_t cols, int8_t* qs, float* d,
                             float* s);

}  // namespace tachyon::reference
