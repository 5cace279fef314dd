// AVX-512 build of attention_span_update: the same arithmetic as the portable kernel in
// ../attention.cpp (every score a fused multiply-add chain over the head's dimensions in order,
// the same exp, lane sums and rescaling), so each row's result is the same bits either way, but
// with register tiles sized for 32 vector registers: 6 query rows x 64 positions of scores, or
// 6 rows x 64 output dimensions, per pass. Each key or value vector loaded serves 6 rows.
// Keys and values come as f32 or, straight from an f16 cache (contiguous or paged), as f16
// bits widened as they are loaded (exactly, so the same bits as widening them first). From a q8
// cache, scores are integer dot products (VNNI) of the keys with the query quantized as q8
// (attention.h), and values are widened exactly as they are loaded, or once per call when
// more than one tile of rows reads them.

// GCC 12 warns that the AVX-512 intrinsics' internal _mm512_undefined_* operands are
// uninitialized (GCC bug 105593); that is their purpose.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/aligned_allocator.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/fast_exp.h"

namespace tachyon::kernels::avx512 {
namespace {

constexpr int kLanes = 16;
static_assert(kLanes == kAttentionGroupPositions, "a group of positions is one vector");
constexpr int kRowTile = 6;     // query rows per register tile
constexpr int kVectorTile = 4;  // vectors (of positions or of dimensions) per register tile
// Widest head the pre-scaled query copy holds; wider heads take the portable kernel.
constexpr int kMaxHeadSize = 1024;
constexpr int kAlignment = 64;  // of the pre-scaled queries: one vector

#define TACHYON_INLINE inline __attribute__((always_inline))

// 16 keys or values (lanes outside `mask` read as 0), stored as f32 or as f16 bits.
TACHYON_INLINE __m512 load_lanes(__mmask16 mask, const float* p) {
  return _mm512_maskz_loadu_ps(mask, p);
}
TACHYON_INLINE __m512 load_lanes(__mmask16 mask, const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
}
// q8's int8 values, unscaled (q8 sources multiply by their scale).
TACHYON_INLINE __m512 load_lanes(__mmask16 mask, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}

// Where a span's keys and values are, positions in groups of 16 (one vector each):
//   key_vector(g): dimension 0 of group g's positions, dimension d key_stride elements on;
//   value_row(p):  position p's head_size values.
// Contiguous f32 (widened spans), or f16 or q8 groups anywhere (a cache's blocks, in place).
// q8 sources (kQ8) come with quantized queries and also give each value's scale, one per kQ8Group dimensions of a position,
// value_scales(p): position p's head_size / 32 scales; their keys are read by q8_score_tile.
struct ContiguousF32 {
  using Element = float;
  static constexpr bool kQ8 = false;
  static constexpr bool kScaledValues = false;
  const float* keys;  // f32 [head_size, key_stride]
  int64_t key_stride;
  const float* values;  // f32 [positions, head_size]
  int head_size;
  const float* key_vector(int g) const { return keys + g * kLanes; }
  const float* value_row(int p) const { return values + static_cast<int64_t>(p) * head_size; }
};
struct GroupedF16 {
  using Element = uint16_t;
  static constexpr bool kQ8 = false;
  static constexpr bool kScaledValues = false;
  const uint16_t* const* key_groups;  // per group: f16 [head_size, key_stride]
  int64_t key_stride;
  const uint16_t* const* value_groups;  // per group: f16 [16, head_size]
  int head_size;
  const uint16_t* key_vector(int g) const { return key_groups[g]; }
  const uint16_t* value_row(int p) const {
    return value_groups[p / kLanes] + static_cast<int64_t>(p % kLanes) * head_size;
  }
};
struct GroupedQ8 {
  using Element = int8_t;
  static constexpr bool kQ8 = true;
  static constexpr bool kScaledValues = true;
  const Q8SpanGroups& span;
  const Q8Queries& queries;
  int64_t key_stride;
  int head_size;
  const int8_t* value_row(int p) const {
    return span.values[p / kLanes] + static_cast<int64_t>(p % kLanes) * head_size;
  }
  const uint16_t* value_scales(int p) const {
    return span.value_scales[p / kLanes] + (p % kLanes) * (head_size / kQ8Group);
  }
};
// q8 keys as GroupedQ8, values widened to f32 beforehand (widen_q8_values): when several
// register tiles of rows read each value, widening once per call beats widening per tile.
struct GroupedQ8WidenedValues {
  using Element = float;
  static constexpr bool kQ8 = true;
  static constexpr bool kScaledValues = false;
  const Q8SpanGroups& span;
  const Q8Queries& queries;
  int64_t key_stride;
  int head_size;
  const float* values;  // f32 [positions, head_size]
  const float* value_row(int p) const { return values + static_cast<int64_t>(p) * head_size; }
};

// Position p's values of dimensions [d0, d0 + 16 * kVectors) from `source`, widened.
template <int kVectors, typename Source>
TACHYON_INLINE void load_values(const Source& source, int p, int d0, const __mmask16* mask,
                                __m512* value) {
  const typename Source::Element* v = source.value_row(p) + d0;
  for (int j = 0; j < kVectors; ++j) value[j] = load_lanes(mask[j], v + j * kLanes);
  if constexpr (Source::kScaledValues) {
    const uint16_t* scales = source.value_scales(p);
    for (int j = 0; j < kVectors; ++j) {
      value[j] = _mm512_mul_ps(value[j],
                               _mm512_set1_ps(_cvtsh_ss(scales[(d0 + j * kLanes) / kQ8Group])));
    }
  }
}

// Lanes [0, count) of a vector (count may be <= 0 or > 16).
TACHYON_INLINE __mmask16 first_lanes(int count) {
  if (count <= 0) return 0;
  if (count >= kLanes) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1);
}

// exp_nonpositive_fused (fast_exp.h) on 16 lanes: the same operations, each rounded alike.
TACHYON_INLINE __m512 exp_nonpositive(__m512 x) {
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  // x > 0 ? 0 : x, keeping x's sign of zero as the scalar code does; NaN and x < -87 take -87.
  const __m512 clamped =
      _mm512_mask_blend_ps(in_range, _mm512_set1_ps(-87.0f), _mm512_min_ps(_mm512_setzero_ps(), x));
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 n =
      _mm512_sub_ps(_mm512_fmadd_ps(clamped, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f),
                                   _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), clamped));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i exponent = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
  const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(exponent, 23));
  return _mm512_maskz_mul_ps(in_range, p, scale);
}

// The 16 lanes summed as a tree (lane j + lane j + width, width 8, 4, 2, 1), as the portable
// kernel sums them.
TACHYON_INLINE float sum_lanes(__m512 v) {
  const __m256 low = _mm512_castps512_ps256(v);
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 v8 = _mm256_add_ps(low, high);
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

// scores[r][p] = sum_d q[r][d] * k[d][p] (q already scaled) for the kVectors vectors of
// positions from p0, written only below `positions`.
// p0 is a multiple of 16; every vector has at least one position below `positions`.
template <int kRows, int kVectors, typename Source>
TACHYON_INLINE void score_tile(const float* q, int head_size, const Source& source, int p0,
                               int positions, float* const* scores) {
  __mmask16 mask[kVectors];
  for (int j = 0; j < kVectors; ++j) mask[j] = first_lanes(positions - p0 - j * kLanes);
  __m512 acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  const typename Source::Element* k[kVectors];
  for (int j = 0; j < kVectors; ++j) k[j] = source.key_vector(p0 / kLanes + j);
  for (int d = 0; d < head_size; ++d) {
    __m512 key[kVectors];
    for (int j = 0; j < kVectors; ++j) {
      key[j] = load_lanes(mask[j], k[j]);
      k[j] += source.key_stride;
    }
    for (int r = 0; r < kRows; ++r) {
      const __m512 qd = _mm512_set1_ps(q[r * head_size + d]);
      for (int j = 0; j < kVectors; ++j) acc[r][j] = _mm512_fmadd_ps(qd, key[j], acc[r][j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      _mm512_mask_storeu_ps(scores[r] + p0 + j * kLanes, mask[j], acc[r][j]);
    }
  }
}

template <int kRows, typename Source>
TACHYON_INLINE void tile_scores(const float* q, int head_size, const Source& source,
                                int positions, float* const* scores) {
  // Whole tiles while more than kVectorTile - 1 vectors remain (the last one masked), then
  // one narrower tile.
  constexpr int kWide = kVectorTile * kLanes;
  int p0 = 0;
  for (; positions - p0 > kWide - kLanes; p0 += kWide) {
    score_tile<kRows, kVectorTile>(q, head_size, source, p0, positions, scores);
  }
  switch ((positions - p0 + kLanes - 1) / kLanes) {
    case 1:
      return score_tile<kRows, 1>(q, head_size, source, p0, positions, scores);
    case 2:
      return score_tile<kRows, 2>(q, head_size, source, p0, positions, scores);
    case 3:
      return score_tile<kRows, 3>(q, head_size, source, p0, positions, scores);
    default:
      return;
  }
}

// Scores of q8 keys (attention.h's arithmetic) for kVectors vectors of positions from p0:
// per 32 dimensions, integer dot products with VPDPBUSD, which takes unsigned bytes, so the
// query goes in as q + 128 and 128 times the keys' sum is taken off again (both exact), then
// score = fma(dot, query scale * key scale, score).
template <int kRows, int kVectors, typename Source>
TACHYON_INLINE void q8_score_tile(int first, int head_size, const Source& source, int p0,
                                  int positions, float* const* scores) {
  const int groups = head_size / kQ8Group;
  __mmask16 mask[kVectors];
  for (int j = 0; j < kVectors; ++j) mask[j] = first_lanes(positions - p0 - j * kLanes);
  __m512 score[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) score[r][j] = _mm512_setzero_ps();
  }
  const int8_t* keys[kVectors];
  const uint16_t* key_scales[kVectors];
  for (int j = 0; j < kVectors; ++j) {
    keys[j] = source.span.keys[p0 / kLanes + j];
    key_scales[j] = source.span.key_scales[p0 / kLanes + j];
  }
  const int64_t row_bytes = source.key_stride * 4;  // one row of 4 dimensions
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < head_size / kQ8Group; ++g) {
    __m512i dot[kRows][kVectors];
    __m512i key_sum[kVectors];
    for (int j = 0; j < kVectors; ++j) {
      key_sum[j] = _mm512_setzero_si512();
      for (int r = 0; r < kRows; ++r) dot[r][j] = _mm512_setzero_si512();
    }
    for (int c = g * kQ8Group / 4; c < (g + 1) * kQ8Group / 4; ++c) {
      __m512i key[kVectors];
      for (int j = 0; j < kVectors; ++j) {
        // 16 positions x 4 dimensions; positions past the span are read (the group has room)
        // and never stored.
        key[j] = _mm512_loadu_si512(keys[j] + c * row_bytes);
        key_sum[j] = _mm512_dpbusd_epi32(key_sum[j], bias, key[j]);
      }
      for (int r = 0; r < kRows; ++r) {
        int32_t four;  // dimensions 4c..4c+3 of the row, + 128 each
        __builtin_memcpy(&four, source.queries.values + (first + r) * head_size + 4 * c, 4);
        const __m512i qd = _mm512_set1_epi32(four ^ static_cast<int32_t>(0x80808080u));
        for (int j = 0; j < kVectors; ++j) dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], qd, key[j]);
      }
    }
    for (int j = 0; j < kVectors; ++j) {
      const __m512 key_scale = load_lanes(mask[j], key_scales[j] + g * source.key_stride);
      for (int r = 0; r < kRows; ++r) {
        const __m512 factor = _mm512_mul_ps(
            _mm512_set1_ps(source.queries.scales[(first + r) * groups + g]), key_scale);
        const __m512 exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][j], key_sum[j]));
        score[r][j] = _mm512_fmadd_ps(exact, factor, score[r][j]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      _mm512_mask_storeu_ps(scores[r] + p0 + j * kLanes, mask[j], score[r][j]);
    }
  }
}

// Scores of q8 keys for rows [first, first + kRows) of the quantized queries, two vectors of
// positions per pass.
template <int kRows, typename Source>
TACHYON_INLINE void q8_tile_scores(int first, int head_size, const Source& source,
                                   int positions, float* const* scores) {
  constexpr int kWide = 2 * kLanes;
  int p0 = 0;
  for (; positions - p0 > kLanes; p0 += kWide) {
    q8_score_tile<kRows, 2>(first, head_size, source, p0, positions, scores);
  }
  if (positions > p0) q8_score_tile<kRows, 1>(first, head_size, source, p0, positions, scores);
}

// The portable kernel's softmax_step on 16 lanes: the row's first `visible` scores become
// exp(score - new max), summed lane by lane (position p in lane p % 16) and the lanes then as
// a tree; returns the factor that rescales what was accumulated before.
TACHYON_INLINE float softmax_step(float* row, int visible, float& running_max, float& running_sum) {
  __m512 lane_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int p = 0;
  for (; p + kLanes <= visible; p += kLanes)
    lane_max = _mm512_max_ps(lane_max, _mm512_loadu_ps(row + p));
  const __mmask16 tail = first_lanes(visible - p);
  lane_max = _mm512_mask_max_ps(lane_max, tail, lane_max, _mm512_maskz_loadu_ps(tail, row + p));
  const float new_max = std::max(running_max, _mm512_reduce_max_ps(lane_max));
  const float correction = kernels::exp_nonpositive_fused(running_max - new_max);
  const __m512 shift = _mm512_set1_ps(new_max);
  __m512 lane_sum = _mm512_setzero_ps();
  for (p = 0; p + kLanes <= visible; p += kLanes) {
    const __m512 weight = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + p), shift));
    _mm512_storeu_ps(row + p, weight);
    lane_sum = _mm512_add_ps(lane_sum, weight);
  }
  if (tail != 0) {
    const __m512 weight =
        exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + p), shift));
    _mm512_mask_storeu_ps(row + p, tail, weight);
    lane_sum = _mm512_mask_add_ps(lane_sum, tail, lane_sum, weight);
  }
  running_sum = running_sum * correction + sum_lanes(lane_sum);
  running_max = new_max;
  return correction;
}

// acc[r][d] = acc[r][d] * correction[r] + sum_p weights[r][p] * v[p][d] over p < visible[r],
// positions added in order, for the kVectors vectors of dimensions from d0.
template <int kRows, int kVectors, typename Source>
TACHYON_INLINE void accumulate_tile(float* const* weights, const int* visible, int common, int most,
                                    const float* correction, int head_size, const Source& source,
                                    int d0, float* const* acc) {
  __mmask16 mask[kVectors];
  for (int j = 0; j < kVectors; ++j) mask[j] = first_lanes(head_size - d0 - j * kLanes);
  __m512 slice[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    const __m512 factor = _mm512_set1_ps(correction[r]);
    for (int j = 0; j < kVectors; ++j) {
      slice[r][j] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask[j], acc[r] + d0 + j * kLanes), factor);
    }
  }
  int p = 0;
  for (; p < common; ++p) {  // every row of the tile sees p
    __m512 value[kVectors];
    load_values<kVectors>(source, p, d0, mask, value);
    for (int r = 0; r < kRows; ++r) {
      const __m512 weight = _mm512_set1_ps(weights[r][p]);
      for (int j = 0; j < kVectors; ++j)
        slice[r][j] = _mm512_fmadd_ps(weight, value[j], slice[r][j]);
    }
  }
  for (; p < most; ++p) {  // only the rows that see this far
    __m512 value[kVectors];
    load_values<kVectors>(source, p, d0, mask, value);
    for (int r = 0; r < kRows; ++r) {
      if (p >= visible[r]) continue;
      const __m512 weight = _mm512_set1_ps(weights[r][p]);
      for (int j = 0; j < kVectors; ++j)
        slice[r][j] = _mm512_fmadd_ps(weight, value[j], slice[r][j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      _mm512_mask_storeu_ps(acc[r] + d0 + j * kLanes, mask[j], slice[r][j]);
    }
  }
}

template <int kRows, typename Source>
TACHYON_INLINE void tile_accumulate(float* const* weights, const int* visible,
                                    const float* correction, int head_size, const Source& source,
                                    float* const* acc) {
  int common = visible[0];
  int most = visible[0];
  for (int r = 1; r < kRows; ++r) {
    common = std::min(common, visible[r]);
    most = std::max(most, visible[r]);
  }
  constexpr int kWide = kVectorTile * kLanes;
  int d0 = 0;
  for (; head_size - d0 > kWide - kLanes; d0 += kWide) {
    accumulate_tile<kRows, kVectorTile>(weights, visible, common, most, correction,
                                               head_size, source, d0, acc);
  }
  switch ((head_size - d0 + kLanes - 1) / kLanes) {
    case 1:
      return accumulate_tile<kRows, 1>(weights, visible, common, most, correction,
                                     head_size, source, d0, acc);
    case 2:
      return accumulate_tile<kRows, 2>(weights, visible, common, most, correction,
                                     head_size, source, d0, acc);
    case 3:
      return accumulate_tile<kRows, 3>(weights, visible, common, most, correction,
                                     head_size, source, d0, acc);
    default:
      return;
  }
}

// Values [0, positions) of a q8 span widened to f32 rows, each exactly as load_values widens it
// (int8 to float, times its f16 scale), so reading these gives the same bits.
void widen_q8_values(const GroupedQ8& source, int positions, float* out) {
  const int head_size = source.head_size;
  for (int p = 0; p < positions; ++p) {
    const int8_t* v = source.value_row(p);
    const uint16_t* scales = source.value_scales(p);
    float* row = out + static_cast<int64_t>(p) * head_size;
    for (int d = 0; d < head_size; d += kLanes) {  // head_size: whole groups of 32
      const __m512 value = load_lanes(0xFFFF, v + d);
      _mm512_storeu_ps(row + d,
                       _mm512_mul_ps(value, _mm512_set1_ps(_cvtsh_ss(scales[d / kQ8Group]))));
    }
  }
}

#include "kernels/cpu/attention_rows.inc"

}  // namespace

bool attention_span_update_supports(int head_size) {
  return head_size > 0 && head_size <= kMaxHeadSize;
}

void attention_span_update(const float* queries, int64_t token_stride, int num_tokens, int group,
                           int head_size, float scale, const int* visible,
                           const float* keys_by_dimension, int64_t key_stride, const float* values,
                           float* scores, int64_t score_stride, float* running_max,
                           float* running_sum, float* accumulator) {
  const ContiguousF32 source{keys_by_dimension, key_stride, values, head_size};
  span_update(queries, token_stride, num_tokens, group, head_size, scale, visible, source, scores,
              score_stride, running_max, running_sum, accumulator);
}

void attention_span_update_f16(const float* queries, int64_t token_stride, int num_tokens,
                               int group, int head_size, float scale, const int* visible,
                               const uint16_t* const* key_groups, int64_t key_stride,
                               const uint16_t* const* value_groups, float* scores,
                               int64_t score_stride, float* running_max, float* running_sum,
                               float* accumulator) {
  const GroupedF16 source{key_groups, key_stride, value_groups, head_size};
  span_update(queries, token_stride, num_tokens, group, head_size, scale, visible, source, scores,
              score_stride, running_max, running_sum, accumulator);
}

void attention_span_update_q8(const Q8Queries& queries, int num_tokens, int group, int head_size,
                              const int* visible, const Q8SpanGroups& span, float* scores,
                              int64_t score_stride, float* running_max, float* running_sum,
                              float* accumulator) {
  // The float queries and scale are not read: the scores come from the quantized ones.
  if (num_tokens * group <= kRowTile) {
    const GroupedQ8 source{span, queries, span.key_stride, head_size};
    return span_update(nullptr, 0, num_tokens, group, head_size, 1.0f, visible, source, scores,
                       score_stride, running_max, running_sum, accumulator);
  }
  // Several tiles of rows read each value (prompts, MLA's query heads): widened once.
  int most = 0;
  for (int i = 0; i < num_tokens; ++i) most = std::max(most, visible[i]);
  thread_local AlignedVector<float> widened;  // f32 [most, head_size]
  widened.resize(static_cast<size_t>(most) * head_size);
  widen_q8_values(GroupedQ8{span, queries, span.key_stride, head_size}, most, widened.data());
  const GroupedQ8WidenedValues source{span, queries, span.key_stride, head_size, widened.data()};
  span_update(nullptr, 0, num_tokens, group, head_size, 1.0f, visible, source, scores,
              score_stride, running_max, running_sum, accumulator);
}

}  // namespace tachyon::kernels::avx512
