// e^x for x <= 0 (softmax weights after subtracting the maximum), branch-free so that loops
// calling it vectorise in every instruction-set clone: Cephes-style range reduction and a
// degree-6 polynomial, about 2 ulp. x below -87 (including -inf) gives exactly 0; x > 0 is
// treated as 0.
#pragma once

#include <bit>
#include <cstdint>

namespace tachyon::kernels {

inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const bool underflow = !(x >= -87.0f);
  const float clamped = underflow ? -87.0f : (x > 0.0f ? 0.0f : x);
  const float n = (clamped * kLog2e + kRoundMagic) - kRoundMagic;  // round(x·log2 e)
  const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
  return underflow ? 0.0f : p * scale;
}

// The same reduction and polynomial with its multiply-adds fused (fewer instructions, at
// least as accurate): the attention kernels' softmax. Callers must compile it where fmaf is a
// single rounding (it always is) and fuse nothing else, so every path gives the same bits;
// kernels/cpu/avx512/attention_avx512.cpp writes out the same steps on 16 lanes.
inline float exp_nonpositive_fused(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const bool underflow = !(x >= -87.0f);
  const float clamped = underflow ? -87.0f : (x > 0.0f ? 0.0f : x);
  const float n = __builtin_fmaf(clamped, kLog2e, kRoundMagic) - kRoundMagic;
  const float r = __builtin_fmaf(n, 2.12194440e-4f, __builtin_fmaf(n, -0.693359375f, clamped));
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r) + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
  return underflow ? 0.0f : p * scale;
}

}  // namespace tachyon::kernels
