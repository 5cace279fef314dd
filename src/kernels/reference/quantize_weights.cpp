#include "kernels/reference/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/half.h"
#include "kernels/reference/block_layouts.h"

namespace tachyon::reference {
namespace {

constexpr int kBlock = 32;

// numpy's steps, each an f32 operation rounded on its own (this file is built with
// -ffp-contract=off): gguf's np_roundf (half away from zero) and its truncations.
float round_half_away(float value) {
  const float magnitude = std::fabs(value);
  const float floored = std::floor(magnitude);
  const float rounded = floored + std::floor(2.0f * (magnitude - floored));
  return value > 0 ? rounded : (value < 0 ? -rounded : 0.0f);
}

// 1 / d, or 0 when d is 0 (gguf: np.where(d == 0, 0, 1 / d)).
float inverse_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// The block's value of largest magnitude, with its sign (the first such, as numpy's argmax).
float signed_max(const float* x) {
  int best = 0;
  for (int i = 1; i < kBlock; ++i) {
    if (std::fabs(x[i]) > std::fabs(x[best])) best = i;
  }
  return x[best];
}

void store_half(uint8_t* at, float value) {
  const uint16_t bits = f32_to_f16(value);
  std::memcpy(at, &bits, 2);
}

// q[i] in 0..15 (or 0..31) packed as gguf does: byte j holds q[j] (low) and q[j + 16] (high);
// for 5-bit values, bit i of qh (little-endian) is bit 4 of q[i].
void pack_nibbles(const uint8_t (&q)[kBlock], uint8_t* qs) {
  for (int j = 0; j < kBlock / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
  }
}
void pack_fifth_bits(const uint8_t (&q)[kBlock], uint8_t* qh) {
  uint32_t bits = 0;
  for (int i = 0; i < kBlock; ++i) bits |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
  std::memcpy(qh, &bits, 4);
}

// Q4_0 / Q5_0: d = signed max / -(2^(bits-1)), q = trunc(x / d + 2^(bits-1) + 0.5) clipped.
void quantize_symmetric(const float* x, int bits, uint8_t (&q)[kBlock], float& d) {
  const float offset = static_cast<float>(1 << (bits - 1));
  d = signed_max(x) / -offset;
  const float id = inverse_or_zero(d);
  const int top = (1 << bits) - 1;
  for (int i = 0; i < kBlock; ++i) {
    const float value = std::trunc(x[i] * id + (offset + 0.5f));
    q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(value), 0, top));
  }
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), q = trunc((x - min) / d + 0.5) clipped.
void quantize_affine(const float* x, int bits, uint8_t (&q)[kBlock], float& d, float& min) {
  float max = x[0];
  min = x[0];
  for (int i = 1; i < kBlock; ++i) {
    max = std::max(max, x[i]);
    min = std::min(min, x[i]);
  }
  const int top = (1 << bits) - 1;
  d = (max - min) / static_cast<float>(top);
  const float id = inverse_or_zero(d);
  for (int i = 0; i < kBlock; ++i) {
    const float value = std::trunc((x[i] - min) * id + 0.5f);
    q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(value), 0, top));
  }
}

}  // namespace

bool can_quantize_weights(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ5_0 ||
         type == DType::kQ5_1 || type == DType::kQ8_0 || type == DType::kQ4_K ||
         type == DType::kQ6_K;
}

Status quantize_weights(DType type, const float* src, int64_t num_elements, void* dst) {
  if (!can_quantize_weights(type)) {
    return unsupported(fmt::format("tachyon cannot quantize weights to {} (Q4_0, Q4_1, Q5_0, "
                                   "Q5_1, Q8_0, Q4_K, Q6_K)",
                                   dtype_name(type)));
  }
  if (type == DType::kQ4_K || type == DType::kQ6_K) {
    if (num_elements % kQkK != 0) {
      return invalid_argument(fmt::format("{} values are not whole super-blocks of {}",
                                          num_elements, kQkK));
    }
    quantize_k_super_blocks(type, src, num_elements / kQkK, static_cast<uint8_t*>(dst));
    return Status();
  }
  if (num_elements % kBlock != 0) {
    return invalid_argument(fmt::format("{} values are not whole blocks of {}", num_elements,
                                        kBlock));
  }
  const int64_t block_bytes = static_cast<int64_t>(dtype_info(type).block_bytes);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < num_elements / kBlock; ++b) {
    const float* x = src + b * kBlock;
    uint8_t* block = out + b * block_bytes;
    uint8_t q[kBlock];
    float d;
    float min;
    switch (type) {
      case DType::kQ8_0: {
        float amax = 0.0f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
        d = amax / 127.0f;
        const float id = inverse_or_zero(d);
        store_half(block + offsetof(BlockQ8_0, d), d);
        for (int i = 0; i < kBlock; ++i) {
          const int8_t value = static_cast<int8_t>(round_half_away(x[i] * id));
          std::memcpy(block + offsetof(BlockQ8_0, qs) + i, &value, 1);
        }
        break;
      }
      case DType::kQ4_0:
        quantize_symmetric(x, 4, q, d);
        store_half(block + offsetof(BlockQ4_0, d), d);
        pack_nibbles(q, block + offsetof(BlockQ4_0, qs));
        break;
      case DType::kQ5_0:
        quantize_symmetric(x, 5, q, d);
        store_half(block + offsetof(BlockQ5_0, d), d);
        pack_fifth_bits(q, block + offsetof(BlockQ5_0, qh));
        pack_nibbles(q, block + offsetof(BlockQ5_0, qs));
        break;
      case DType::kQ4_1:
        quantize_affine(x, 4, q, d, min);
        store_half(block + offsetof(BlockQ4_1, d), d);
        store_half(block + offsetof(BlockQ4_1, m), min);
        pack_nibbles(q, block + offsetof(BlockQ4_1, qs));
        break;
      default:  // kQ5_1
        quantize_affine(x, 5, q, d, min);
        store_half(block + offsetof(BlockQ5_1, d), d);
        store_half(block + offsetof(BlockQ5_1, m), min);
        pack_fifth_bits(q, block + offsetof(BlockQ5_1, qh));
        pack_nibbles(q, block + offsetof(BlockQ5_1, qs));
        break;
    }
  }
  return Status();
}

}  // namespace tachyon::reference
