#include "kernels/reference/dot_products.h"

#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "kernels/reference/block_layouts.h"
#include "kernels/reference/quantize_activations.h"

namespace tachyon::reference {
namespace {

uint16_t load_u16(const uint8_t* bytes) {
  uint16_t value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

uint32_t load_u32(const uint8_t (&bytes)[4]) {
  uint32_t value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

// Nibbles as in BlockQ4_0: value j in the low nibble of qs[j], value j + 16 in the high one.
void split_nibbles(const uint8_t (&qs)[kQk / 2], int16_t* q) {
  for (int j = 0; j < kQk / 2; ++j) {
    q[j] = static_cast<int16_t>(qs[j] & 0x0f);
    q[j + kQk / 2] = static_cast<int16_t>(qs[j] >> 4);
  }
}

void add_fifth_bits(const uint8_t (&qh)[4], int16_t* q) {
  const uint32_t bits = load_u32(qh);
  for (int j = 0; j < kQk; ++j) q[j] = static_cast<int16_t>(q[j] | (((bits >> j) & 1u) << 4));
}

}  // namespace

bool has_q8_dot(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return true;
    default:
      return false;
  }
}

bool has_float_dot(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

SplitBlock split_block(DType type, const uint8_t* row, int64_t block_index) {
  SplitBlock out{};
  switch (type) {
    case DType::kQ4_0: {
      const auto block = load_block<BlockQ4_0>(row + block_index * sizeof(BlockQ4_0));
      split_nibbles(block.qs, out.q);
      out.d = f16_to_f32(block.d);
      out.m = -8.0f * out.d;
      break;
    }
    case DType::kQ4_1: {
      const auto block = load_block<BlockQ4_1>(row + block_index * sizeof(BlockQ4_1));
      split_nibbles(block.qs, out.q);
      out.d = f16_to_f32(block.d);
      out.m = f16_to_f32(block.m);
      break;
    }
    case DType::kQ5_0: {
      const auto block = load_block<BlockQ5_0>(row + block_index * sizeof(BlockQ5_0));
      split_nibbles(block.qs, out.q);
      add_fifth_bits(block.qh, out.q);
      out.d = f16_to_f32(block.d);
      out.m = -16.0f * out.d;
      break;
    }
    case DType::kQ5_1: {
      const auto block = load_block<BlockQ5_1>(row + block_index * sizeof(BlockQ5_1));
      split_nibbles(block.qs, out.q);
      add_fifth_bits(block.qh, out.q);
      out.d = f16_to_f32(block.d);
      out.m = f16_to_f32(block.m);
      break;
    }
    case DType::kQ8_0: {
      const auto block = load_block<BlockQ8_0>(row + block_index * sizeof(BlockQ8_0));
      for (int j = 0; j < kQk; ++j) out.q[j] = block.qs[j];
      out.d = f16_to_f32(block.d);
      out.m = 0.0f;
      break;
    }
    default:
      TACHYON_CHECK(has_q8_dot(type));
  }
  return out;
}

float dot_q8(DType type, const uint8_t* row, const int8_t* qs, const float* d, const float* s,
             int64_t cols) {
  float acc = 0.0f;
  float corr = 0.0f;
  for (int64_t b = 0; b < cols / kQ8Block; ++b) {
    const SplitBlock block = split_block(type, row, b);
    int32_t isum = 0;
    for (int j = 0; j < kQ8Block; ++j) isum += block.q[j] * qs[b * kQ8Block + j];
    acc += (block.d * d[b]) * static_cast<float>(isum);
    corr += block.m * s[b];
  }
  return acc + corr;
}

float dot_float(DType type, const uint8_t* row, const float* x, int64_t cols) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    float w = 0.0f;
    switch (type) {
      case DType::kF32:
        std::memcpy(&w, row + 4 * c, sizeof(w));
        break;
      case DType::kF16:
        w = f16_to_f32(load_u16(row + 2 * c));
        break;
      case DType::kBF16:
        w = bf16_to_f32(load_u16(row + 2 * c));
        break;
      default:
        TACHYON_CHECK(has_float_dot(type));
    }
    acc += w * x[c];
  }
  return acc;
}

float dot_f32(const float* w, const float* x, int64_t cols) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) acc += w[c] * x[c];
  return acc;
}

}  // namespace tachyon::reference
