#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/aligned_allocator.h"
#include "core/check.h"
#include "core/half.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {
namespace {

constexpr int kLanes = 16;
// Independent sums per inner loop: each score (and each output element) still adds its terms in
// order, but several advance together, so a loop does not wait one add's latency per term; the
// results are the same bits as one at a time. Products are accumulated with explicit fused
// multiply-adds and nothing else is fused (this file is built with -ffp-contract=off), so every
// path and clone rounds alike (the plain x86-64 clone calls libm's fmaf, exact and slow).
constexpr int kChains = 4;
// Query rows that share each loaded key or value vector (4 rows x 2 vectors of scores, or
// 4 rows x 4 vectors of output, stay in registers).
constexpr int kRowTile = 4;

#define TACHYON_INLINE inline __attribute__((always_inline))

// scores[r][p] = sum_d (q_r[d] * scale) * k[d][p] for p < num_positions, rows r of a tile
// (kRows rows, row r's query at q[r]); dimensions are summed in order.
template <int kRows>
TACHYON_INLINE void tile_scores(const float* const* q, int head_size, float scale,
                                int num_positions, const float* keys_by_dimension,
                                int64_t key_stride, float* const* scores) {
  constexpr int kWide = kRows == 1 ? kChains : 2;  // vectors of positions per pass
  int p0 = 0;
  for (; p0 + kWide * kLanes <= num_positions; p0 += kWide * kLanes) {
    float partial[kRows][kWide * kLanes] = {};
    for (int d = 0; d < head_size; ++d) {
      const float* k = keys_by_dimension + d * key_stride + p0;
      for (int r = 0; r < kRows; ++r) {
        const float qd = q[r][d] * scale;
        for (int j = 0; j < kWide * kLanes; ++j)
          partial[r][j] = __builtin_fmaf(qd, k[j], partial[r][j]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kWide * kLanes; ++j) scores[r][p0 + j] = partial[r][j];
    }
  }
  for (; p0 < num_positions; p0 += kLanes) {
    const int lanes = num_positions - p0 < kLanes ? num_positions - p0 : kLanes;
    for (int r = 0; r < kRows; ++r) {
      float partial[kLanes] = {};
      if (lanes == kLanes) {
        for (int d = 0; d < head_size; ++d) {
          const float qd = q[r][d] * scale;
          const float* k = keys_by_dimension + d * key_stride + p0;
          for (int j = 0; j < kLanes; ++j) partial[j] = __builtin_fmaf(qd, k[j], partial[j]);
        }
      } else {
        for (int d = 0; d < head_size; ++d) {
          const float qd = q[r][d] * scale;
          const float* k = keys_by_dimension + d * key_stride + p0;
          for (int j = 0; j < lanes; ++j) partial[j] = __builtin_fmaf(qd, k[j], partial[j]);
        }
      }
      for (int j = 0; j < lanes; ++j) scores[r][p0 + j] = partial[j];
    }
  }
}

// Online softmax step of one row over its first `visible` scores: the scores become weights
// exp(score - new max); returns the factor that rescales what was accumulated before.
TACHYON_INLINE float softmax_step(float* row, int visible, float& running_max, float& running_sum) {
  // Maximum and sum in kLanes interleaved lanes (position p in lane p % kLanes), combined in a
  // fixed order at the end: vectorized, and the same bits for a row whatever computes it.
  float lane_max[kLanes];
  for (int j = 0; j < kLanes; ++j) lane_max[j] = -std::numeric_limits<float>::infinity();
  int p0 = 0;
  for (; p0 + kLanes <= visible; p0 += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lane_max[j] = lane_max[j] > row[p0 + j] ? lane_max[j] : row[p0 + j];
    }
  }
  for (int j = 0; p0 + j < visible; ++j) lane_max[j] = std::max(lane_max[j], row[p0 + j]);
  float block_max = lane_max[0];
  for (int j = 1; j < kLanes; ++j) block_max = std::max(block_max, lane_max[j]);
  const float new_max = std::max(running_max, block_max);
  // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
  const float correction = exp_nonpositive_fused(running_max - new_max);
  float lane_sum[kLanes] = {};
  p0 = 0;
  for (; p0 + kLanes <= visible; p0 += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      row[p0 + j] = exp_nonpositive_fused(row[p0 + j] - new_max);
      lane_sum[j] += row[p0 + j];
    }
  }
  for (int j = 0; p0 + j < visible; ++j) {
    row[p0 + j] = exp_nonpositive_fused(row[p0 + j] - new_max);
    lane_sum[j] += row[p0 + j];
  }
  // The lanes in a tree (lane j + lane j + width, width 8, 4, 2, 1): short dependency chains,
  // and what a vector unit computes by halving.
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lane_sum[j] += lane_sum[j + width];
  }
  const float block_sum = lane_sum[0];
  running_sum = running_sum * correction + block_sum;
  running_max = new_max;
  return correction;
}

// acc_r = acc_r * correction_r + sum_p weights_r[p] * v[p] over p < visible_r, for the kRows
// rows of a tile; positions are added in order.
template <int kRows>
TACHYON_INLINE void tile_accumulate(float* const* weights, const int* visible,
                                    const float* correction, int head_size, const float* values,
                                    float* const* acc) {
  int common = visible[0];
  int most = visible[0];
  for (int r = 1; r < kRows; ++r) {
    common = std::min(common, visible[r]);
    most = std::max(most, visible[r]);
  }
  constexpr int kWide = kRows == 1 ? kChains : 4;  // vectors of one output row per pass
  int d0 = 0;
  for (; d0 + kWide * kLanes <= head_size; d0 += kWide * kLanes) {
    float slice[kRows][kWide * kLanes];
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kWide * kLanes; ++j) slice[r][j] = acc[r][d0 + j] * correction[r];
    }
    int p = 0;
    for (; p < common; ++p) {  // every row of the tile sees p
      const float* v = values + static_cast<int64_t>(p) * head_size + d0;
      for (int r = 0; r < kRows; ++r) {
        const float weight = weights[r][p];
        for (int j = 0; j < kWide * kLanes; ++j)
          slice[r][j] = __builtin_fmaf(weight, v[j], slice[r][j]);
      }
    }
    for (; p < most; ++p) {  // only the rows that see this far
      const float* v = values + static_cast<int64_t>(p) * head_size + d0;
      for (int r = 0; r < kRows; ++r) {
        if (p >= visible[r]) continue;
        const float weight = weights[r][p];
        for (int j = 0; j < kWide * kLanes; ++j)
          slice[r][j] = __builtin_fmaf(weight, v[j], slice[r][j]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kWide * kLanes; ++j) acc[r][d0 + j] = slice[r][j];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    int d = d0;
    for (; d + kLanes <= head_size; d += kLanes) {
      float slice[kLanes];
      for (int j = 0; j < kLanes; ++j) slice[j] = acc[r][d + j] * correction[r];
      for (int p = 0; p < visible[r]; ++p) {
        const float weight = weights[r][p];
        const float* v = values + static_cast<int64_t>(p) * head_size + d;
        for (int j = 0; j < kLanes; ++j) slice[j] = __builtin_fmaf(weight, v[j], slice[j]);
      }
      for (int j = 0; j < kLanes; ++j) acc[r][d + j] = slice[j];
    }
    for (; d < head_size; ++d) {
      float sum = acc[r][d] * correction[r];
      for (int p = 0; p < visible[r]; ++p) {
        sum = __builtin_fmaf(weights[r][p], values[static_cast<int64_t>(p) * head_size + d], sum);
      }
      acc[r][d] = sum;
    }
  }
}

// Rows [first, first + kRows) of a span update (row = token * group + head).
template <int kRows>
TACHYON_INLINE void span_rows(const float* queries, int64_t token_stride, int group, int head_size,
                              float scale, const int* visible, int first,
                              const float* keys_by_dimension, int64_t key_stride,
                              const float* values, float* scores, int64_t score_stride,
                              float* running_max, float* running_sum, float* accumulator) {
  const float* q[kRows];
  float* row_scores[kRows];
  float* acc[kRows];
  int row_visible[kRows];
  int most = 0;
  for (int r = 0; r < kRows; ++r) {
    const int row = first + r;
    q[r] = queries + (row / group) * token_stride + (row % group) * head_size;
    row_scores[r] = scores + row * score_stride;
    acc[r] = accumulator + static_cast<int64_t>(row) * head_size;
    row_visible[r] = visible[row / group];
    most = std::max(most, row_visible[r]);
  }
  tile_scores<kRows>(q, head_size, scale, most, keys_by_dimension, key_stride, row_scores);
  float correction[kRows];
  for (int r = 0; r < kRows; ++r) {
    // A row that sees none of this span keeps its state (correction 1, nothing added).
    correction[r] = row_visible[r] == 0
                        ? 1.0f
                        : softmax_step(row_scores[r], row_visible[r], running_max[first + r],
                                       running_sum[first + r]);
  }
  tile_accumulate<kRows>(row_scores, row_visible, correction, head_size, values, acc);
}

// The plain-loop kernel, which the compiler vectorises for each level (below): AVX2 machines
// run it compiled for AVX2 + FMA where their hand-written kernel does not take the head size,
// as AVX-512 machines do.
__attribute__((always_inline)) inline void span_update_body(
    const float* queries, int64_t token_stride, int num_tokens, int group, int head_size,
    float scale, const int* visible, const float* keys_by_dimension, int64_t key_stride,
    const float* values, float* scores, int64_t score_stride, float* running_max,
    float* running_sum, float* accumulator) {
  const int rows = num_tokens * group;
  int first = 0;
  for (; first + kRowTile <= rows; first += kRowTile) {
    span_rows<kRowTile>(queries, token_stride, group, head_size, scale, visible, first,
                        keys_by_dimension, key_stride, values, scores, score_stride, running_max,
                        running_sum, accumulator);
  }
  for (; first < rows; ++first) {
    span_rows<1>(queries, token_stride, group, head_size, scale, visible, first, keys_by_dimension,
                 key_stride, values, scores, score_stride, running_max, running_sum, accumulator);
  }
}

#define TACHYON_SPAN_UPDATE_PARAMS                                                       \
  (const float* queries, int64_t token_stride, int num_tokens, int group, int head_size, \
   float scale, const int* visible, const float* keys_by_dimension, int64_t key_stride,  \
   const float* values, float* scores, int64_t score_stride, float* running_max,         \
   float* running_sum, float* accumulator)
#define TACHYON_SPAN_UPDATE_ARGS                                                           \
  (queries, token_stride, num_tokens, group, head_size, scale, visible, keys_by_dimension, \
   key_stride, values, scores, score_stride, running_max, running_sum, accumulator)
TACHYON_TARGET_AVX512 void span_update_avx512 TACHYON_SPAN_UPDATE_PARAMS {
  span_update_body TACHYON_SPAN_UPDATE_ARGS;
}
TACHYON_TARGET_AVX2 void span_update_avx2 TACHYON_SPAN_UPDATE_PARAMS {
  span_update_body TACHYON_SPAN_UPDATE_ARGS;
}
void span_update_portable TACHYON_SPAN_UPDATE_PARAMS {
  span_update_body TACHYON_SPAN_UPDATE_ARGS;
}

}  // namespace

void attention_span_update_at_level(KernelLevel level, const float* queries, int64_t token_stride,
                                    int num_tokens, int group, int head_size, float scale,
                                    const int* visible, const float* keys_by_dimension,
                                    int64_t key_stride, const float* values, float* scores,
                                    int64_t score_stride, float* running_max, float* running_sum,
                                    float* accumulator) {
  TACHYON_CHECK(kernel_level_available(level));
  note_family_level(KernelFamily::kAttention, level);
  switch (level) {
    case KernelLevel::kAmx:
    case KernelLevel::kAvx512:
      if (avx512::attention_span_update_supports(head_size)) {
        return avx512::attention_span_update TACHYON_SPAN_UPDATE_ARGS;
      }
      return span_update_avx512 TACHYON_SPAN_UPDATE_ARGS;
    case KernelLevel::kAvx2:
      if (avx2::attention_span_update_supports(head_size)) {
        return avx2::attention_span_update TACHYON_SPAN_UPDATE_ARGS;
      }
      return span_update_avx2 TACHYON_SPAN_UPDATE_ARGS;
    case KernelLevel::kReference:
      break;
  }
  span_update_portable TACHYON_SPAN_UPDATE_ARGS;
}

void attention_span_update(const float* queries, int64_t token_stride, int num_tokens, int group,
                           int head_size, float scale, const int* visible,
                           const float* keys_by_dimension, int64_t key_stride, const float* values,
                           float* scores, int64_t score_stride, float* running_max,
                           float* running_sum, float* accumulator) {
  static const KernelLevel level = active_kernel_level();
  attention_span_update_at_level(level, queries, token_stride, num_tokens, group, head_size, scale,
                                 visible, keys_by_dimension, key_stride, values, scores,
                                 score_stride, running_max, running_sum, accumulator);
}

namespace {

// Values that are the keys (MLA's latent, stored once: null values): the groups' keys copied into
// value rows, the layout every level's kernel reads, for the groups holding what the call's
// tokens see. Exact copies, so each value is the same float as in a span whose values
// are stored apart. Once per call, shared by all its rows (MLA: every query head of a token
// reads each latent). A group's 16 positions are all copied (groups have room for them).
constexpr int kMaxCopiedGroups = 64;  // positions per call <= 64 * 16 (spans are 128)

int groups_holding(int num_tokens, const int* visible) {
  int most = 0;
  for (int i = 0; i < num_tokens; ++i) most = std::max(most, visible[i]);
  const int groups = (most + kAttentionGroupPositions - 1) / kAttentionGroupPositions;
  TACHYON_CHECK(groups <= kMaxCopiedGroups);
  return groups;
}

// f16 keys [head_size, key_stride] per group into rows [16, head_size]: 8 x 8 transposes (SSE2,
// every x86-64), the dimensions past the last whole 8 one by one.
struct F16KeyValueRows {
  AlignedVector<uint16_t> values;  // f16 [groups, kAttentionGroupPositions, head_size]
  const uint16_t* value_groups[kMaxCopiedGroups];

  const uint16_t* const* copy(const uint16_t* const* key_groups, int64_t key_stride,
                              int head_size, int num_groups) {
    constexpr int kPositions = kAttentionGroupPositions;
    values.resize(static_cast<size_t>(num_groups) * kPositions * head_size);
    for (int g = 0; g < num_groups; ++g) {
      uint16_t* out = values.data() + static_cast<size_t>(g) * kPositions * head_size;
      const uint16_t* keys = key_groups[g];
      int d0 = 0;
      for (; d0 + 8 <= head_size; d0 += 8) {
        for (int p0 = 0; p0 < kPositions; p0 += 8) {
          __m128i r[8];
          for (int i = 0; i < 8; ++i) {
            r[i] = _mm_loadu_si128(
                reinterpret_cast<const __m128i*>(keys + (d0 + i) * key_stride + p0));
          }
          // Rows of 8 positions for 8 dimensions become rows of 8 dimensions per position.
          const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
          const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
          const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
          const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
          const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
          const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
          const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
          const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
          const __m128i rows[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4),
                                   _mm_unpacklo_epi64(b1, b5), _mm_unpackhi_epi64(b1, b5),
                                   _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                                   _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
          for (int i = 0; i < 8; ++i) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (p0 + i) * head_size + d0),
                             rows[i]);
          }
        }
      }
      for (; d0 < head_size; ++d0) {
        for (int p = 0; p < kPositions; ++p) out[p * head_size + d0] = keys[d0 * key_stride + p];
      }
      value_groups[g] = out;
    }
    return value_groups;
  }
};

// q8 keys (rows of 4 dimensions, each position's 4 bytes together) into value rows by 4 x 4
// transposes of those 4-byte pieces (SSE2), and the keys' scales ([head_size / 32, key_stride])
// into the values' ([16, head_size / 32]).
struct Q8KeyValueRows {
  AlignedVector<int8_t> values;    // int8 [groups, kAttentionGroupPositions, head_size]
  AlignedVector<uint16_t> scales;  // f16 [groups, kAttentionGroupPositions, head_size / 32]
  const int8_t* value_groups[kMaxCopiedGroups];
  const uint16_t* scale_groups[kMaxCopiedGroups];

  Q8SpanGroups copy(const Q8SpanGroups& span, int head_size, int num_groups) {
    constexpr int kPositions = kAttentionGroupPositions;
    const int scales_per_row = head_size / kQ8Group;
    values.resize(static_cast<size_t>(num_groups) * kPositions * head_size);
    scales.resize(static_cast<size_t>(num_groups) * kPositions * scales_per_row);
    const int64_t row_bytes = span.key_stride * 4;  // keys: rows of 4 dimensions
    for (int g = 0; g < num_groups; ++g) {
      int8_t* out = values.data() + static_cast<size_t>(g) * kPositions * head_size;
      uint16_t* out_scales = scales.data() + static_cast<size_t>(g) * kPositions * scales_per_row;
      for (int c0 = 0; c0 < head_size / 4; c0 += 4) {  // 16 dimensions (head_size % 32 == 0)
        for (int p0 = 0; p0 < kPositions; p0 += 4) {
          __m128i r[4];  // dimensions 4 (c0 + i) .. + 3 of positions p0 .. p0 + 3
          for (int i = 0; i < 4; ++i) {
            r[i] = _mm_loadu_si128(
                reinterpret_cast<const __m128i*>(span.keys[g] + (c0 + i) * row_bytes + 4 * p0));
          }
          const __m128i a0 = _mm_unpacklo_epi32(r[0], r[1]), a1 = _mm_unpackhi_epi32(r[0], r[1]);
          const __m128i a2 = _mm_unpacklo_epi32(r[2], r[3]), a3 = _mm_unpackhi_epi32(r[2], r[3]);
          const __m128i rows[4] = {_mm_unpacklo_epi64(a0, a2), _mm_unpackhi_epi64(a0, a2),
                                   _mm_unpacklo_epi64(a1, a3), _mm_unpackhi_epi64(a1, a3)};
          for (int j = 0; j < 4; ++j) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (p0 + j) * head_size + 4 * c0),
                             rows[j]);
          }
        }
      }
      for (int s = 0; s < scales_per_row; ++s) {
        for (int p = 0; p < kPositions; ++p) {
          out_scales[p * scales_per_row + s] = span.key_scales[g][s * span.key_stride + p];
        }
      }
      value_groups[g] = out;
      scale_groups[g] = out_scales;
    }
    return {span.keys, span.key_scales, span.key_stride, value_groups, scale_groups};
  }
};

}  // namespace

bool attention_reads_f16_at_level(KernelLevel level, int head_size) {
  switch (level) {
    case KernelLevel::kAmx:
    case KernelLevel::kAvx512:
      return avx512::attention_span_update_supports(head_size);
    case KernelLevel::kAvx2:
      return avx2::attention_span_update_supports(head_size);
    case KernelLevel::kReference:
      break;
  }
  return false;
}

bool attention_reads_f16(int head_size) {
  static const KernelLevel level = active_kernel_level();
  return attention_reads_f16_at_level(level, head_size);
}

#define TACHYON_SPAN_UPDATE_F16_ARGS                                                    \
  (queries, token_stride, num_tokens, group, head_size, scale, visible, key_groups,     \
   key_stride, value_groups, scores, score_stride, running_max, running_sum, accumulator)
void attention_span_update_f16_at_level(KernelLevel level, const float* queries,
                                        int64_t token_stride, int num_tokens, int group,
                                        int head_size, float scale, const int* visible,
                                        const uint16_t* const* key_groups, int64_t key_stride,
                                        const uint16_t* const* given_value_groups,
                                        float* scores, int64_t score_stride, float* running_max,
                                        float* running_sum, float* accumulator) {
  TACHYON_CHECK(kernel_level_available(level) && attention_reads_f16_at_level(level, head_size));
  note_family_level(KernelFamily::kAttention, level);
  const uint16_t* const* value_groups = given_value_groups;
  if (value_groups == nullptr) {
    thread_local F16KeyValueRows rows;
    value_groups =
        rows.copy(key_groups, key_stride, head_size, groups_holding(num_tokens, visible));
  }
  if (level >= KernelLevel::kAvx512) {
    return avx512::attention_span_update_f16 TACHYON_SPAN_UPDATE_F16_ARGS;
  }
  avx2::attention_span_update_f16 TACHYON_SPAN_UPDATE_F16_ARGS;
}

void attention_span_update_f16(const float* queries, int64_t token_stride, int num_tokens,
                               int group, int head_size, float scale, const int* visible,
                               const uint16_t* const* key_groups, int64_t key_stride,
                               const uint16_t* const* value_groups, float* scores,
                               int64_t score_stride, float* running_max, float* running_sum,
                               float* accumulator) {
  static const KernelLevel level = active_kernel_level();
  attention_span_update_f16_at_level(level, queries, token_stride, num_tokens, group, head_size,
                                     scale, visible, key_groups, key_stride, value_groups, scores,
                                     score_stride, running_max, running_sum, accumulator);
}

void quantize_queries_q8(const float* queries, int64_t token_stride, int num_tokens, int group,
                         int head_size, float scale, int8_t* values, float* scales) {
  // Exact IEEE operations only (max, division, products, and rounding by adding and taking off
  // 1.5 * 2^23), so the values do not depend on how they are computed. SSE2: every x86-64.
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 magic = _mm_set1_ps(12582912.0f);
  for (int row = 0; row < num_tokens * group; ++row) {
    const float* query = queries + (row / group) * token_stride + (row % group) * head_size;
    for (int g = 0; g < head_size / kQ8Group; ++g) {
      __m128 x[kQ8Group / 4];
      __m128 amax = _mm_setzero_ps();
      for (int i = 0; i < kQ8Group / 4; ++i) {
        x[i] = _mm_mul_ps(_mm_loadu_ps(query + g * kQ8Group + 4 * i), _mm_set1_ps(scale));
        amax = _mm_max_ps(amax, _mm_andnot_ps(sign, x[i]));
      }
      amax = _mm_max_ps(amax, _mm_shuffle_ps(amax, amax, _MM_SHUFFLE(1, 0, 3, 2)));
      amax = _mm_max_ps(amax, _mm_shuffle_ps(amax, amax, _MM_SHUFFLE(2, 3, 0, 1)));
      const float d = _mm_cvtss_f32(amax) / 127.0f;
      const __m128 inverse = _mm_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      scales[static_cast<int64_t>(row) * (head_size / kQ8Group) + g] = d;
      int8_t* out = values + static_cast<int64_t>(row) * head_size + g * kQ8Group;
      for (int i = 0; i < kQ8Group / 4; ++i) {
        const __m128 rounded =
            _mm_sub_ps(_mm_add_ps(_mm_mul_ps(x[i], inverse), magic), magic);
        const __m128i whole = _mm_cvttps_epi32(rounded);  // exact: already whole
        const __m128i packed = _mm_packs_epi16(_mm_packs_epi32(whole, whole), whole);
        const int32_t four = _mm_cvtsi128_si32(packed);
        __builtin_memcpy(out + 4 * i, &four, 4);
      }
    }
  }
}

namespace {

constexpr int kMaxQ8HeadSize = 1024;

// The portable q8 kernel, a row at a time: the scores as attention.h defines them, then the
// softmax and the values (widened once per call) as the f32 kernel adds them, so that each row
// gets the SIMD kernels' bits.
void span_update_q8_portable(const Q8Queries& queries, int num_tokens, int group, int head_size,
                             const int* visible, const Q8SpanGroups& span, float* scores,
                             int64_t score_stride, float* running_max, float* running_sum,
                             float* accumulator) {
  const int groups = head_size / kQ8Group;
  int most = 0;
  for (int i = 0; i < num_tokens; ++i) most = std::max(most, visible[i]);
  thread_local std::vector<float> values_storage;  // f32 [most, head_size]
  std::vector<float>& values = values_storage;
  values.resize(static_cast<size_t>(most) * head_size);
  for (int p = 0; p < most; ++p) {
    const int i = p % kAttentionGroupPositions;
    q8_to_f32_row(span.values[p / kAttentionGroupPositions] + static_cast<int64_t>(i) * head_size,
                  span.value_scales[p / kAttentionGroupPositions] + i * groups,
                  values.data() + static_cast<size_t>(p) * head_size, head_size);
  }
  for (int row = 0; row < num_tokens * group; ++row) {
    const int row_visible = visible[row / group];
    if (row_visible == 0) continue;  // its state stays as it was
    const int8_t* q = queries.values + static_cast<int64_t>(row) * head_size;
    const float* q_scales = queries.scales + static_cast<int64_t>(row) * groups;
    float* row_scores = scores + row * score_stride;
    for (int p = 0; p < row_visible; ++p) {
      const int8_t* keys = span.keys[p / kAttentionGroupPositions];
      const uint16_t* key_scales = span.key_scales[p / kAttentionGroupPositions];
      const int at = p % kAttentionGroupPositions;
      float score = 0.0f;
      for (int g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int d = g * kQ8Group; d < (g + 1) * kQ8Group; ++d) {
          dot += q[d] * keys[q8_key_index(at, d, span.key_stride)];
        }
        const float factor = q_scales[g] * f16_to_f32(key_scales[g * span.key_stride + at]);
        score = __builtin_fmaf(static_cast<float>(dot), factor, score);
      }
      row_scores[p] = score;
    }
    float correction =
        softmax_step(row_scores, row_visible, running_max[row], running_sum[row]);
    float* acc = accumulator + static_cast<int64_t>(row) * head_size;
    tile_accumulate<1>(&row_scores, &row_visible, &correction, head_size, values.data(), &acc);
  }
}

}  // namespace

bool attention_reads_q8_at_level(KernelLevel level, int head_size) {
  (void)level;  // every level has a q8 kernel
  return head_size > 0 && head_size % kQ8Group == 0 && head_size <= kMaxQ8HeadSize;
}

bool attention_reads_q8(int head_size) {
  static const KernelLevel level = active_kernel_level();
  return attention_reads_q8_at_level(level, head_size);
}

void attention_span_update_q8_at_level(KernelLevel level, const Q8Queries& queries,
                                       int num_tokens, int group, int head_size,
                                       const int* visible, const Q8SpanGroups& given_span,
                                       float* scores, int64_t score_stride, float* running_max,
                                       float* running_sum, float* accumulator) {
  TACHYON_CHECK(kernel_level_available(level) && attention_reads_q8_at_level(level, head_size));
  note_family_level(KernelFamily::kAttention, level);
  Q8SpanGroups span = given_span;
  if (span.values == nullptr) {
    thread_local Q8KeyValueRows rows;
    span = rows.copy(given_span, head_size, groups_holding(num_tokens, visible));
  }
  switch (level) {
    case KernelLevel::kAmx:
    case KernelLevel::kAvx512:
      return avx512::attention_span_update_q8(queries, num_tokens, group, head_size, visible,
                                              span, scores, score_stride, running_max,
                                              running_sum, accumulator);
    case KernelLevel::kAvx2:
      return avx2::attention_span_update_q8(queries, num_tokens, group, head_size, visible, span,
                                            scores, score_stride, running_max, running_sum,
                                            accumulator);
    case KernelLevel::kReference:
      break;
  }
  span_update_q8_portable(queries, num_tokens, group, head_size, visible, span, scores,
                          score_stride, running_max, running_sum, accumulator);
}

void attention_span_update_q8(const Q8Queries& queries, int num_tokens, int group, int head_size,
                              const int* visible, const Q8SpanGroups& span, float* scores,
                              int64_t score_stride, float* running_max, float* running_sum,
                              float* accumulator) {
  static const KernelLevel level = active_kernel_level();
  attention_span_update_q8_at_level(level, queries, num_tokens, group, head_size, visible, span,
                                    scores, score_stride, running_max, running_sum, accumulator);
}

void attention_block_update(const float* queries, int group, int head_size, float scale,
                            int num_positions, const float* keys_by_dimension, int64_t key_stride,
                            const float* values, float* scores, float* running_max,
                            float* running_sum, float* accumulator) {
  attention_span_update(queries, 0, 1, group, head_size, scale, &num_positions, keys_by_dimension,
                        key_stride, values, scores, num_positions, running_max, running_sum,
                        accumulator);
}

namespace {

__attribute__((always_inline)) inline void attention_finish_body(const float* accumulator,
                                                                 const float* running_sum,
                                                                 int group, int head_size,
                                                                 float* out) {
  for (int h = 0; h < group; ++h) {
    const float inverse_sum = 1.0f / running_sum[h];
    for (int d = 0; d < head_size; ++d) {
      out[h * head_size + d] = accumulator[h * head_size + d] * inverse_sum;
    }
  }
}

}  // namespace

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kAttention, void, attention_finish,
                          (const float* accumulator, const float* running_sum, int group,
                           int head_size, float* out),
                          (accumulator, running_sum, group, head_size, out))

}  // namespace tachyon::kernels
