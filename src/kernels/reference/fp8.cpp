#include "kernels/reference/fp8.h"

#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tachyon::reference {
namespace {

// A finite value from its fields: the significand (implicit bit included for normals) times a
// power of two, exact in f32 for both formats.
float compose(bool negative, int exponent, int significand) {
  const float magnitude = std::ldexp(static_cast<float>(significand), exponent);
  return negative ? -magnitude : magnitude;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t bits) {
  const bool negative = (bits & 0x80) != 0;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return compose(negative, -6 - 3, mantissa);  // subnormal: m/8 * 2^-6
  return compose(negative, exponent - 7 - 3, 8 + mantissa);       // (1 + m/8) * 2^(e-7)
}

float fp8_e5m2_to_f32(uint8_t bits) {
  const bool negative = (bits & 0x80) != 0;
  const int exponent = (bits >> 2) & 0x1F;
  const int mantissa = bits & 0x3;
  if (exponent == 0x1F) {
    if (mantissa != 0) return std::numeric_limits<float>::quiet_NaN();
    return negative ? -std::numeric_limits<float>::infinity()
                    : std::numeric_limits<float>::infinity();
  }
  if (exponent == 0) return compose(negative, -14 - 2, mantissa);  // subnormal: m/4 * 2^-14
  return compose(negative, exponent - 15 - 2, 4 + mantissa);       // (1 + m/4) * 2^(e-15)
}

Status dequantize_fp8_e4m3_blocks(const uint8_t* weights, int64_t rows, int64_t cols,
                                  const float* scale_inv, int64_t scale_rows, int64_t scale_cols,
                                  int64_t block, float* out) {
  if (rows < 0 || cols < 0 || block <= 0) {
    return invalid_argument(fmt::format("FP8 dequantization of a {}x{} matrix in {}-blocks",
                                        rows, cols, block));
  }
  const int64_t want_rows = (rows + block - 1) / block;
  const int64_t want_cols = (cols + block - 1) / block;
  if (scale_rows != want_rows || scale_cols != want_cols) {
    return corrupt_data(fmt::format("FP8 weights of shape [{}, {}] in {}x{} blocks need a scale of "
                                    "shape [{}, {}], got [{}, {}]",
                                    rows, cols, block, block, want_rows, want_cols, scale_rows,
                                    scale_cols));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scale_inv + (r / block) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = fp8_e4m3_to_f32(weights[r * cols + c]) * scale_row[c / block];
    }
  }
  return Status();
}

}  // namespace tachyon::reference
