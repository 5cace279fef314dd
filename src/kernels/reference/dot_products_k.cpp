#include "kernels/reference/dot_products_k.h"

#include "core/check.h"
#include "core/half.h"
#include "kernels/reference/block_layouts.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::reference {
namespace {

// Value i (0..255) of a Q4_K/Q5_K block's low four bits: nibble s of qs[32*c + l] for
// i = 64*c + 32*s + l.
int four_bit_value(const uint8_t (&qs)[kQkK / 2], int i) {
  return (qs[32 * (i / 64) + i % 32] >> (4 * ((i / 32) % 2))) & 0x0f;
}

// Block dot for Q4_K (kFifthBit false) and Q5_K.
template <typename Block, bool kFifthBit>
void q4_k_like_sums(const Block& block, const int8_t* a, const int16_t* bsums, int32_t* isum,
                    int32_t* msum) {
  *isum = 0;
  *msum = 0;
  for (int j = 0; j < kQkK / 32; ++j) {
    const ScaleMin sm = q4_k_scale_min(block.scales, j);
    int32_t dot = 0;
    for (int i = 32 * j; i < 32 * (j + 1); ++i) {
      int q = four_bit_value(block.qs, i);
      if constexpr (kFifthBit) q |= ((block.qh[i % 32] >> (i / 32)) & 1) << 4;
      dot += q * a[i];
    }
    *isum += sm.scale * dot;
    *msum += sm.min * (bsums[2 * j] + bsums[2 * j + 1]);
  }
}

int32_t q6_k_sum(const BlockQ6_K& block, const int8_t* a, const int16_t* bsums) {
  int32_t isum = 0;
  for (int j = 0; j < kQkK / 16; ++j) {
    int32_t dot = 0;
    for (int i = 16 * j; i < 16 * (j + 1); ++i) {
      const int h = i / 128;
      const int low = (block.ql[64 * h + i % 64] >> (4 * ((i / 64) % 2))) & 0x0f;
      const int high = (block.qh[32 * h + i % 32] >> (2 * ((i / 32) % 4))) & 0x03;
      dot += (low | (high << 4)) * a[i];
    }
    isum += block.scales[j] * (dot - 32 * bsums[j]);
  }
  return isum;
}

}  // namespace

bool has_q8_k_dot(DType type) {
  return type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}

float dot_q8_k(DType type, const uint8_t* row, const int8_t* qs, const float* d,
               const int16_t* bsums, int64_t cols) {
  constexpr int kGroups = kQ8KBlock / kQ8KSumGroup;
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / kQ8KBlock; ++b) {
    const int8_t* a = qs + b * kQ8KBlock;
    const int16_t* sums = bsums + b * kGroups;
    const float da = d[b];
    int32_t isum = 0;
    int32_t msum = 0;
    float dw = 0.0f;
    float dmin = 0.0f;
    switch (type) {
      case DType::kQ4_K: {
        const auto block = load_block<BlockQ4_K>(row + b * static_cast<int64_t>(sizeof(BlockQ4_K)));
        q4_k_like_sums<BlockQ4_K, false>(block, a, sums, &isum, &msum);
        dw = f16_to_f32(block.d);
        dmin = f16_to_f32(block.dmin);
        break;
      }
      case DType::kQ5_K: {
        const auto block = load_block<BlockQ5_K>(row + b * static_cast<int64_t>(sizeof(BlockQ5_K)));
        q4_k_like_sums<BlockQ5_K, true>(block, a, sums, &isum, &msum);
        dw = f16_to_f32(block.d);
        dmin = f16_to_f32(block.dmin);
        break;
      }
      case DType::kQ6_K: {
        const auto block = load_block<BlockQ6_K>(row + b * static_cast<int64_t>(sizeof(BlockQ6_K)));
        isum = q6_k_sum(block, a, sums);
        dw = f16_to_f32(block.d);
        break;
      }
      default:
        TACHYON_CHECK(has_q8_k_dot(type));
    }
    acc = acc + (dw * da) * static_cast<float>(isum);
    if (type != DType::kQ6_K) acc = acc - (dmin * da) * static_cast<float>(msum);
  }
  return acc;
}

}  // namespace tachyon::reference
