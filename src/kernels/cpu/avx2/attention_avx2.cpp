// AVX2 + FMA + F16C build of attention_span_update: the arithmetic of the portable kernel in
// ../attention.cpp (every score a fused multiply-add chain over the head's dimensions in order,
// the same exp, 16 lane sums combined as a tree, the same rescaling), so each row's result is
// the same bits at every level, with register tiles sized for AVX2's 16 vector registers:
// 4 query rows x 24 positions of scores, or 4 rows x 24 output dimensions, per pass (12
// accumulators, 3 loaded vectors and a broadcast). Each key or value vector loaded serves 4 rows.
// Keys and values come as f32 or, straight from an f16 cache (contiguous or paged), as f16
// bits widened as they are loaded (exactly, so the same bits as widening them first). From a q8
// cache, scores are integer dot products of the keys with the query quantized as q8
// (attention.h), and values are widened exactly as they are loaded, or once per call when
// more than one tile of rows reads them.

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "core/aligned_allocator.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/fast_exp.h"

namespace tachyon::kernels::avx2 {
namespace {

constexpr int kLanes = 8;
// The portable kernel's softmax sums positions in 16 lanes (p in lane p % 16): two vectors.
constexpr int kSumLanes = 16;
static_assert(kSumLanes == kAttentionGroupPositions, "a group of positions is two vectors");
constexpr int kRowTile = 4;     // query rows per register tile
constexpr int kVectorTile = 3;  // vectors (of positions or of dimensions) per register tile
// Widest head the pre-scaled query copy holds; wider heads take the portable kernel.
constexpr int kMaxHeadSize = 1024;
constexpr int kAlignment = 32;  // of the pre-scaled queries: one vector

#define TACHYON_INLINE inline __attribute__((always_inline))

// Where a span's keys and values are:
//   key_vector(p): dimension 0 of positions [p, p + 8) (p a multiple of 8), dimension d
//                  key_stride elements on;
//   value_row(p):  position p's head_size values.
// Contiguous f32 (widened spans), or f16 or q8 groups of 16 positions anywhere (a cache's
// blocks, in place). f16 and q8 keys are read 8 at a time without a mask (AVX2 has no masked
// 8- or 16-bit load): a group always holds room for its 16 positions (key_stride >= 16), and
// lanes past the span's positions are never stored.
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
  const float* key_vector(int p) const { return keys + p; }
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
  const uint16_t* key_vector(int p) const { return key_groups[p / kSumLanes] + p % kSumLanes; }
  const uint16_t* value_row(int p) const {
    return value_groups[p / kSumLanes] + static_cast<int64_t>(p % kSumLanes) * head_size;
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
    return span.values[p / kSumLanes] + static_cast<int64_t>(p % kSumLanes) * head_size;
  }
  const uint16_t* value_scales(int p) const {
    return span.value_scales[p / kSumLanes] + (p % kSumLanes) * (head_size / kQ8Group);
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

// All-ones in lanes [0, count) of a vector (count may be <= 0 or > 8).
TACHYON_INLINE __m256i first_lanes(int count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
}

// 8 keys: f32 lanes outside `mask` read as 0; f16 lanes all read (see GroupedF16).
TACHYON_INLINE __m256 load_keys(__m256i mask, const float* p) {
  return _mm256_maskload_ps(p, mask);
}
TACHYON_INLINE __m256 load_keys(__m256i, const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 8 whole values (head sizes are multiples of 8 here).
TACHYON_INLINE __m256 load_values(const float* p) { return _mm256_loadu_ps(p); }
TACHYON_INLINE __m256 load_values(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TACHYON_INLINE __m256 load_values(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Position p's values of dimensions [d0, d0 + 8 * kVectors) from `source`, widened.
template <int kVectors, typename Source>
TACHYON_INLINE void load_value_vectors(const Source& source, int p, int d0, __m256* value) {
  const typename Source::Element* v = source.value_row(p) + d0;
  for (int j = 0; j < kVectors; ++j) value[j] = load_values(v + j * kLanes);
  if constexpr (Source::kScaledValues) {
    const uint16_t* scales = source.value_scales(p);
    for (int j = 0; j < kVectors; ++j) {
      value[j] = _mm256_mul_ps(value[j],
                               _mm256_set1_ps(_cvtsh_ss(scales[(d0 + j * kLanes) / kQ8Group])));
    }
  }
}

// exp_nonpositive_fused (fast_exp.h) on 8 lanes: the same operations, each rounded alike.
TACHYON_INLINE __m256 exp_nonpositive(__m256 x) {
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  // x > 0 ? 0 : x, keeping x's sign of zero as the scalar code does; NaN and x < -87 take -87.
  const __m256 clamped =
      _mm256_blendv_ps(_mm256_set1_ps(-87.0f), _mm256_min_ps(_mm256_setzero_ps(), x), in_range);
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 n =
      _mm256_sub_ps(_mm256_fmadd_ps(clamped, _mm256_set1_ps(1.44269504088896341f), magic), magic);
  const __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f),
                                   _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), clamped));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(exponent, 23));
  return _mm256_and_ps(in_range, _mm256_mul_ps(p, scale));
}

// The 16 lanes (low: lanes 0-7, high: 8-15) summed as a tree (lane j + lane j + width, width
// 8, 4, 2, 1), as the portable kernel sums them.
TACHYON_INLINE float sum_lanes(__m256 low, __m256 high) {
  const __m256 v8 = _mm256_add_ps(low, high);
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

TACHYON_INLINE float max_lanes(__m256 v) {
  const __m128 v4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 v2 = _mm_max_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_max_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

// scores[r][p] = sum_d q[r][d] * k[d][p] (q already scaled) for the kVectors vectors of
// positions from p0, written only below `positions`.
// p0 is a multiple of 8; every vector has at least one position below `positions`.
template <int kRows, int kVectors, typename Source>
TACHYON_INLINE void score_tile(const float* q, int head_size, const Source& source, int p0,
                               int positions, float* const* scores) {
  __m256i mask[kVectors];
  for (int j = 0; j < kVectors; ++j) mask[j] = first_lanes(positions - p0 - j * kLanes);
  __m256 acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  const typename Source::Element* k[kVectors];
  for (int j = 0; j < kVectors; ++j) k[j] = source.key_vector(p0 + j * kLanes);
  for (int d = 0; d < head_size; ++d) {
    __m256 key[kVectors];
    for (int j = 0; j < kVectors; ++j) {
      key[j] = load_keys(mask[j], k[j]);
      k[j] += source.key_stride;
    }
    for (int r = 0; r < kRows; ++r) {
      const __m256 qd = _mm256_broadcast_ss(q + r * head_size + d);
      for (int j = 0; j < kVectors; ++j) acc[r][j] = _mm256_fmadd_ps(qd, key[j], acc[r][j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      _mm256_maskstore_ps(scores[r] + p0 + j * kLanes, mask[j], acc[r][j]);
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
    default:
      return;
  }
}

// Scores of q8 keys (attention.h's arithmetic) for the 8 positions from p0: per 32
// dimensions, integer dot products with VPMADDUBSW, which takes unsigned bytes, so |q| goes in
// and q's sign moves to the keys (|q * k| <= 127 * 127: no pair saturates), then
// score = fma(dot, query scale * key scale, score). Positions past the span are read (a group
// has room for 16) and never stored.
template <int kRows, typename Source>
TACHYON_INLINE void q8_score_tile(int first, int head_size, const Source& source, int p0,
                                  int positions, float* const* scores) {
  const int groups = head_size / kQ8Group;
  const __m256i mask = first_lanes(positions - p0);
  __m256 score[kRows];
  for (int r = 0; r < kRows; ++r) score[r] = _mm256_setzero_ps();
  const int8_t* keys = source.span.keys[p0 / kSumLanes] + (p0 % kSumLanes) * 4;
  const uint16_t* key_scales = source.span.key_scales[p0 / kSumLanes] + p0 % kSumLanes;
  const int64_t row_bytes = source.key_stride * 4;  // one row of 4 dimensions
  const __m256i ones = _mm256_set1_epi16(1);
  for (int g = 0; g < head_size / kQ8Group; ++g) {
    __m256i dot[kRows];
    for (int r = 0; r < kRows; ++r) dot[r] = _mm256_setzero_si256();
    for (int c = g * kQ8Group / 4; c < (g + 1) * kQ8Group / 4; ++c) {
      // 8 positions x 4 dimensions.
      const __m256i key =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + c * row_bytes));
      for (int r = 0; r < kRows; ++r) {
        int32_t four;  // dimensions 4c..4c+3 of the row
        __builtin_memcpy(&four, source.queries.values + (first + r) * head_size + 4 * c, 4);
        const __m256i qd = _mm256_set1_epi32(four);
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_sign_epi8(qd, qd), _mm256_sign_epi8(key, qd));
        dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 key_scale = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(key_scales + g * source.key_stride)));
    for (int r = 0; r < kRows; ++r) {
      const __m256 factor = _mm256_mul_ps(
          _mm256_set1_ps(source.queries.scales[(first + r) * groups + g]), key_scale);
      score[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), factor, score[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) _mm256_maskstore_ps(scores[r] + p0, mask, score[r]);
}

// Scores of q8 keys for rows [first, first + kRows) of the quantized queries, 8 positions per
// pass.
template <int kRows, typename Source>
TACHYON_INLINE void q8_tile_scores(int first, int head_size, const Source& source,
                                   int positions, float* const* scores) {
  for (int p0 = 0; p0 < positions; p0 += kLanes) {
    q8_score_tile<kRows>(first, head_size, source, p0, positions, scores);
  }
}

// The portable kernel's softmax_step: the row's first `visible` scores become
// exp(score - new max), summed lane by lane (position p in lane p % 16, lanes 0-7 in `low`,
// 8-15 in `high`) and the lanes then as a tree; returns the factor that rescales what was
// accumulated before.
TACHYON_INLINE float softmax_step(float* row, int visible, float& running_max, float& running_sum) {
  const __m256 minus_infinity = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 lane_max = minus_infinity;
  int p = 0;
  for (; p + kLanes <= visible; p += kLanes)
    lane_max = _mm256_max_ps(lane_max, _mm256_loadu_ps(row + p));
  const __m256i tail = first_lanes(visible - p);
  lane_max = _mm256_max_ps(lane_max, _mm256_blendv_ps(minus_infinity, _mm256_maskload_ps(row + p, tail),
                                                      _mm256_castsi256_ps(tail)));
  const float new_max = std::max(running_max, max_lanes(lane_max));
  const float correction = kernels::exp_nonpositive_fused(running_max - new_max);
  const __m256 shift = _mm256_set1_ps(new_max);
  // Weights of positions [at, at + 8), lanes from `count` on weighing 0 (which leaves their
  // sums as they were), stored over the scores.
  auto weigh = [&](int at, int count) {
    if (count >= kLanes) {
      const __m256 weight = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + at), shift));
      _mm256_storeu_ps(row + at, weight);
      return weight;
    }
    const __m256i mask = first_lanes(count);
    const __m256 weight =
        _mm256_and_ps(_mm256_castsi256_ps(mask),
                      exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(row + at, mask), shift)));
    _mm256_maskstore_ps(row + at, mask, weight);
    return weight;
  };
  __m256 low_sum = _mm256_setzero_ps();   // lanes 0-7
  __m256 high_sum = _mm256_setzero_ps();  // lanes 8-15
  for (p = 0; p + kSumLanes <= visible; p += kSumLanes) {
    low_sum = _mm256_add_ps(low_sum, weigh(p, kLanes));
    high_sum = _mm256_add_ps(high_sum, weigh(p + kLanes, kLanes));
  }
  if (p < visible) low_sum = _mm256_add_ps(low_sum, weigh(p, visible - p));
  if (p + kLanes < visible) high_sum = _mm256_add_ps(high_sum, weigh(p + kLanes, visible - p - kLanes));
  running_sum = running_sum * correction + sum_lanes(low_sum, high_sum);
  running_max = new_max;
  return correction;
}

// acc[r][d] = acc[r][d] * correction[r] + sum_p weights[r][p] * v[p][d] over p < visible[r],
// positions added in order, for the kVectors vectors of dimensions from d0.
template <int kRows, int kVectors, typename Source>
TACHYON_INLINE void accumulate_tile(float* const* weights, const int* visible, int common, int most,
                                    const float* correction, const Source& source, int d0,
                                    float* const* acc) {
  __m256 slice[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    const __m256 factor = _mm256_set1_ps(correction[r]);
    for (int j = 0; j < kVectors; ++j) {
      slice[r][j] = _mm256_mul_ps(_mm256_loadu_ps(acc[r] + d0 + j * kLanes), factor);
    }
  }
  int p = 0;
  for (; p < common; ++p) {  // every row of the tile sees p
    __m256 value[kVectors];
    load_value_vectors<kVectors>(source, p, d0, value);
    for (int r = 0; r < kRows; ++r) {
      const __m256 weight = _mm256_broadcast_ss(weights[r] + p);
      for (int j = 0; j < kVectors; ++j)
        slice[r][j] = _mm256_fmadd_ps(weight, value[j], slice[r][j]);
    }
  }
  for (; p < most; ++p) {  // only the rows that see this far
    __m256 value[kVectors];
    load_value_vectors<kVectors>(source, p, d0, value);
    for (int r = 0; r < kRows; ++r) {
      if (p >= visible[r]) continue;
      const __m256 weight = _mm256_broadcast_ss(weights[r] + p);
      for (int j = 0; j < kVectors; ++j)
        slice[r][j] = _mm256_fmadd_ps(weight, value[j], slice[r][j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) _mm256_storeu_ps(acc[r] + d0 + j * kLanes, slice[r][j]);
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
  for (; d0 + kWide <= head_size; d0 += kWide) {
    accumulate_tile<kRows, kVectorTile>(weights, visible, common, most, correction, source, d0,
                                        acc);
  }
  switch ((head_size - d0) / kLanes) {
    case 1:
      return accumulate_tile<kRows, 1>(weights, visible, common, most, correction, source, d0,
                                       acc);
    case 2:
      return accumulate_tile<kRows, 2>(weights, visible, common, most, correction, source, d0,
                                       acc);
    default:
      return;
  }
}

// Values [0, positions) of a q8 span widened to f32 rows, each exactly as load_value_vectors
// widens it (int8 to float, times its f16 scale), so reading these gives the same bits.
void widen_q8_values(const GroupedQ8& source, int positions, float* out) {
  const int head_size = source.head_size;
  for (int p = 0; p < positions; ++p) {
    const int8_t* v = source.value_row(p);
    const uint16_t* scales = source.value_scales(p);
    float* row = out + static_cast<int64_t>(p) * head_size;
    for (int d = 0; d < head_size; d += kLanes) {  // head_size: whole groups of 32
      _mm256_storeu_ps(row + d, _mm256_mul_ps(load_values(v + d),
                                              _mm256_set1_ps(_cvtsh_ss(scales[d / kQ8Group]))));
    }
  }
}

#include "kernels/cpu/attention_rows.inc"

}  // namespace

bool attention_span_update_supports(int head_size) {
  return head_size > 0 && head_size <= kMaxHeadSize && head_size % kLanes == 0;
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

}  // namespace tachyon::kernels::avx2
