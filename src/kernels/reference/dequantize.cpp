#include "kernels/reference/dequantize.h"

#include <cstring>
#include <string>

#include "core/half.h"
#include "kernels/reference/block_layouts.h"

// Every formula below rounds to f32 after each multiply and add, in the order ggml and the gguf
// Python package use, so results are bit-identical to them. The order matters: in Q6_K
// (d * scale) * q and d * (scale * q) differ in the last bit. This file is built with
// -ffp-contract=off (see src/kernels/CMakeLists.txt) so `a * b + c` never becomes an FMA; today
// that is insurance, since every product that feeds an add here is exact in f32.

namespace tachyon::reference {
namespace {

void decode_block(const BlockQ4_0& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQk / 2; ++j) {
    out[j] = d * static_cast<float>((block.qs[j] & 0x0f) - 8);
    out[j + kQk / 2] = d * static_cast<float>((block.qs[j] >> 4) - 8);
  }
}

void decode_block(const BlockQ4_1& block, float* out) {
  const float d = f16_to_f32(block.d);
  const float m = f16_to_f32(block.m);
  for (int j = 0; j < kQk / 2; ++j) {
    out[j] = d * static_cast<float>(block.qs[j] & 0x0f) + m;
    out[j + kQk / 2] = d * static_cast<float>(block.qs[j] >> 4) + m;
  }
}

uint32_t load_u32(const uint8_t (&bytes)[4]) {
  uint32_t value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

// Value j of a Q5_0/Q5_1 block, in [0, 31].
int q5_value(const uint8_t (&qs)[kQk / 2], uint32_t qh, int j) {
  const int low = j < kQk / 2 ? qs[j] & 0x0f : qs[j - kQk / 2] >> 4;
  const int high = static_cast<int>((qh >> j) & 1u);
  return low | (high << 4);
}

void decode_block(const BlockQ5_0& block, float* out) {
  const float d = f16_to_f32(block.d);
  const uint32_t qh = load_u32(block.qh);
  for (int j = 0; j < kQk; ++j) out[j] = d * static_cast<float>(q5_value(block.qs, qh, j) - 16);
}

void decode_block(const BlockQ5_1& block, float* out) {
  const float d = f16_to_f32(block.d);
  const float m = f16_to_f32(block.m);
  const uint32_t qh = load_u32(block.qh);
  for (int j = 0; j < kQk; ++j) out[j] = d * static_cast<float>(q5_value(block.qs, qh, j)) + m;
}

void decode_block(const BlockQ8_0& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQk; ++j) out[j] = d * static_cast<float>(block.qs[j]);
}

// Bits 2s..2s+1 of qs[32*h + l] hold value 128*h + 32*s + l (the Q2_K/Q3_K low bits).
int two_bit_value(const uint8_t (&qs)[kQkK / 4], int i) {
  const int h = i / 128;
  const int s = (i / 32) % 4;
  const int l = i % 32;
  return (qs[32 * h + l] >> (2 * s)) & 0x03;
}

void decode_block(const BlockQ2_K& block, float* out) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int sub = 0; sub < kQkK / 16; ++sub) {
    const float scale = d * static_cast<float>(block.scales[sub] & 0x0f);
    const float min = dmin * static_cast<float>(block.scales[sub] >> 4);
    for (int i = 16 * sub; i < 16 * (sub + 1); ++i) {
      out[i] = scale * static_cast<float>(two_bit_value(block.qs, i)) - min;
    }
  }
}

void decode_block(const BlockQ3_K& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int sub = 0; sub < kQkK / 16; ++sub) {
    const float scale = d * static_cast<float>(q3_k_scale(block.scales, sub));
    for (int i = 16 * sub; i < 16 * (sub + 1); ++i) {
      const bool high_bit = (block.hmask[i % 32] >> (i / 32)) & 1;
      const int q = two_bit_value(block.qs, i) - (high_bit ? 0 : 4);
      out[i] = scale * static_cast<float>(q);
    }
  }
}

// Nibble s of qs[32*c + l] holds value 64*c + 32*s + l (the Q4_K/Q5_K low bits).
int four_bit_value(const uint8_t (&qs)[kQkK / 2], int i) {
  const int c = i / 64;
  const int s = (i / 32) % 2;
  const int l = i % 32;
  return (qs[32 * c + l] >> (4 * s)) & 0x0f;
}

void decode_block(const BlockQ4_K& block, float* out) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int sub = 0; sub < kQkK / 32; ++sub) {
    const ScaleMin sm = q4_k_scale_min(block.scales, sub);
    const float scale = d * static_cast<float>(sm.scale);
    const float min = dmin * static_cast<float>(sm.min);
    for (int i = 32 * sub; i < 32 * (sub + 1); ++i) {
      out[i] = scale * static_cast<float>(four_bit_value(block.qs, i)) - min;
    }
  }
}

void decode_block(const BlockQ5_K& block, float* out) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int sub = 0; sub < kQkK / 32; ++sub) {
    const ScaleMin sm = q4_k_scale_min(block.scales, sub);
    const float scale = d * static_cast<float>(sm.scale);
    const float min = dmin * static_cast<float>(sm.min);
    for (int i = 32 * sub; i < 32 * (sub + 1); ++i) {
      const int high = (block.qh[i % 32] >> (i / 32)) & 1;
      const int q = four_bit_value(block.qs, i) | (high << 4);
      out[i] = scale * static_cast<float>(q) - min;
    }
  }
}

void decode_block(const BlockQ6_K& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int sub = 0; sub < kQkK / 16; ++sub) {
    const float scale = d * static_cast<float>(block.scales[sub]);
    for (int i = 16 * sub; i < 16 * (sub + 1); ++i) {
      const int h = i / 128;
      const int low = (block.ql[64 * h + i % 64] >> (4 * ((i / 64) % 2))) & 0x0f;
      const int high = (block.qh[32 * h + i % 32] >> (2 * ((i / 32) % 4))) & 0x03;
      out[i] = scale * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

void decode_block(const BlockQ8_K& block, float* out) {
  for (int j = 0; j < kQkK; ++j) out[j] = block.d * static_cast<float>(block.qs[j]);
}

template <typename Block>
void decode_blocks(const uint8_t* src, float* dst, int64_t num_blocks, int64_t block_elements) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    decode_block(load_block<Block>(src + b * static_cast<int64_t>(sizeof(Block))),
                 dst + b * block_elements);
  }
}

// Half-width floats (f16, bf16): one uint16_t each, possibly unaligned.
template <float (*kConvert)(uint16_t)>
void decode_halves(const uint8_t* src, float* dst, int64_t num_elements) {
  for (int64_t i = 0; i < num_elements; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, sizeof(bits));
    dst[i] = kConvert(bits);
  }
}

}  // namespace

Status dequantize(DType type, const void* src, float* dst, int64_t num_elements) {
  // Look up by id, not by enum: a DType cast from an unchecked file value must not abort.
  const std::optional<DTypeInfo> info = dtype_info(static_cast<uint32_t>(type));
  if (!info) {
    return unsupported("dequantize: unknown type id " +
                       std::to_string(static_cast<uint32_t>(type)));
  }
  if (num_elements < 0) {
    return invalid_argument("dequantize: num_elements is " + std::to_string(num_elements) +
                            ", must be >= 0");
  }
  if (num_elements % info->block_elements != 0) {
    return invalid_argument("dequantize: " + std::string(info->name) + " num_elements " +
                            std::to_string(num_elements) + " is not a multiple of its block size " +
                            std::to_string(info->block_elements));
  }
  if (num_elements > 0 && (src == nullptr || dst == nullptr)) {
    return invalid_argument("dequantize: null buffer for " + std::to_string(num_elements) +
                            " elements");
  }

  const auto* bytes = static_cast<const uint8_t*>(src);
  const int64_t block_elements = info->block_elements;
  const int64_t num_blocks = num_elements / block_elements;
  switch (type) {
    case DType::kF32:
      if (num_elements > 0) std::memcpy(dst, bytes, static_cast<size_t>(num_elements) * 4);
      return Status::ok_status();
    case DType::kF16:
      decode_halves<f16_to_f32>(bytes, dst, num_elements);
      return Status::ok_status();
    case DType::kBF16:
      decode_halves<bf16_to_f32>(bytes, dst, num_elements);
      return Status::ok_status();
    case DType::kQ4_0:
      decode_blocks<BlockQ4_0>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ4_1:
      decode_blocks<BlockQ4_1>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ5_0:
      decode_blocks<BlockQ5_0>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ5_1:
      decode_blocks<BlockQ5_1>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ8_0:
      decode_blocks<BlockQ8_0>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ2_K:
      decode_blocks<BlockQ2_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ3_K:
      decode_blocks<BlockQ3_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ4_K:
      decode_blocks<BlockQ4_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ5_K:
      decode_blocks<BlockQ5_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ6_K:
      decode_blocks<BlockQ6_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    case DType::kQ8_K:
      decode_blocks<BlockQ8_K>(bytes, dst, num_blocks, block_elements);
      return Status::ok_status();
    default:
      return unsupported("dequantize: type " + std::string(info->name) +
                         " has no dequantize-to-f32 yet");
  }
}

}  // namespace tachyon::reference
