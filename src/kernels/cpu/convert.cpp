#include "kernels/cpu/convert.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "core/check.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {
namespace {

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// F16C comes with both SIMD levels (kernel_level.h); the conversions give the same bits.
bool use_f16c() {
  static const KernelLevel level = active_kernel_level();
  note_family_level(KernelFamily::kConversion, level);
  return level != KernelLevel::kReference;
}

}  // namespace

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  if (use_f16c()) return f32_to_f16_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  if (use_f16c()) return f16_to_f32_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_q8_row(const float* src, int8_t* dst, uint16_t* scales, int64_t n) {
  TACHYON_CHECK(n % kQ8Group == 0);
  for (int64_t g = 0; g < n / kQ8Group; ++g) {
    const float* x = src + g * kQ8Group;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    scales[g] = f32_to_f16(d);
    for (int i = 0; i < kQ8Group; ++i) {
      dst[g * kQ8Group + i] = static_cast<int8_t>(std::round(x[i] * inverse));
    }
  }
}

void q8_to_f32_row(const int8_t* src, const uint16_t* scales, float* dst, int64_t n) {
  TACHYON_CHECK(n % kQ8Group == 0);
  for (int64_t g = 0; g < n / kQ8Group; ++g) {
    const float d = f16_to_f32(scales[g]);
    for (int i = 0; i < kQ8Group; ++i) {
      dst[g * kQ8Group + i] = static_cast<float>(src[g * kQ8Group + i]) * d;
    }
  }
}

}  // namespace tachyon::kernels
