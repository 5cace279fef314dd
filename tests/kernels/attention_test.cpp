// The attention kernels (the variant this CPU runs) against the double-precision reference.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/convert.h"
#include "kernels/reference/attention.h"

namespace tachyon {
namespace {

struct Case {
  int group;
  int head_size;
  int num_positions;
  float query_scale;  // large values make scores far apart: softmax must subtract the max
};

// The online softmax, folding blocks of any size one after another, gives the reference's
// softmax(q·Kᵀ)·V over all positions.
TEST(AttentionKernelTest, OnlineBlocksMatchReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const Case cases[] = {{1, 16, 1, 1.0f},   {3, 64, 16, 1.0f},  {4, 64, 17, 1.0f},
                        {3, 80, 300, 1.0f}, {2, 128, 65, 1.0f}, {1, 32, 1000, 0.1f},
                        {3, 64, 33, 40.0f}, {5, 14, 9, 3.0f}};
  for (const Case& c : cases) {
    for (int block_size : {1, 5, 16, 64}) {
      std::vector<float> queries(c.group * c.head_size);
      std::vector<float> keys(static_cast<size_t>(c.num_positions) * c.head_size);
      std::vector<float> values(keys.size());
      for (float& q : queries) q = normal(rng) * c.query_scale;
      for (float& k : keys) k = normal(rng);
      for (float& v : values) v = normal(rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
      std::vector<float> running_max(c.group, -INFINITY), running_sum(c.group, 0.0f);
      std::vector<float> accumulator(queries.size(), 0.0f), scores(c.group * block_size);
      std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * block_size);
      for (int start = 0; start < c.num_positions; start += block_size) {
        const int count = std::min(block_size, c.num_positions - start);
        for (int p = 0; p < count; ++p) {
          for (int d = 0; d < c.head_size; ++d) {
            keys_by_dimension[static_cast<size_t>(d) * block_size + p] =
                keys[static_cast<size_t>(start + p) * c.head_size + d];
          }
        }
        kernels::attention_block_update(queries.data(), c.group, c.head_size, scale, count,
                                        keys_by_dimension.data(), block_size,
                                        values.data() + static_cast<size_t>(start) * c.head_size,
                                        scores.data(), running_max.data(), running_sum.data(),
                                        accumulator.data());
      }
      std::vector<float> out(queries.size()), expected(queries.size());
      kernels::attention_finish(accumulator.data(), running_sum.data(), c.group, c.head_size,
                                out.data());
      reference::attention_group(queries.data(), c.group, c.head_size, scale, c.num_positions,
                                 keys.data(), values.data(), expected.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(std::isfinite(out[i]));
        EXPECT_NEAR(out[i], expected[i], 1e-4f)
            << "group " << c.group << " head_size " << c.head_size << " positions "
            << c.num_positions << " block " << block_size << " index " << i;
      }
    }
  }
}

// Many tokens against one span (the prompt path) give each row exactly what the one-token
// update gives it: same bits, whatever the row tiling, visible counts and head sizes.
TEST(AttentionKernelTest, SpanUpdateMatchesOneTokenUpdatesBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  struct SpanCase {
    int num_tokens, group, head_size, span;
  };
  for (const SpanCase c : {SpanCase{1, 3, 64, 128}, SpanCase{16, 3, 64, 128},
                           SpanCase{7, 4, 128, 100}, SpanCase{5, 1, 80, 33},
                           SpanCase{9, 2, 14, 40}}) {
    const int64_t token_stride = static_cast<int64_t>(c.group) * c.head_size + 8;
    std::vector<float> queries(static_cast<size_t>(c.num_tokens) * token_stride);
    std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * c.span);
    std::vector<float> values(static_cast<size_t>(c.span) * c.head_size);
    for (float& x : queries) x = normal(rng);
    for (float& x : keys_by_dimension) x = normal(rng);
    for (float& x : values) x = normal(rng);
    // Causal visibility inside the span, the first tokens seeing none of it.
    std::vector<int> visible(c.num_tokens);
    for (int i = 0; i < c.num_tokens; ++i) {
      visible[i] = std::clamp(c.span - c.num_tokens + i - 2, 0, c.span);
    }
    const int rows = c.num_tokens * c.group;
    // A state carried in from an earlier span, so that the rescaling is exercised too.
    std::vector<float> max0(rows), sum0(rows), acc0(static_cast<size_t>(rows) * c.head_size);
    for (int r = 0; r < rows; ++r) {
      max0[r] = normal(rng);
      sum0[r] = 1.0f + std::fabs(normal(rng));
    }
    for (float& x : acc0) x = normal(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));

    std::vector<float> max1 = max0, sum1 = sum0, acc1 = acc0;
    std::vector<float> scores(static_cast<size_t>(rows) * c.span);
    kernels::attention_span_update(queries.data(), token_stride, c.num_tokens, c.group,
                                   c.head_size, scale, visible.data(), keys_by_dimension.data(),
                                   c.span, values.data(), scores.data(), c.span, max1.data(),
                                   sum1.data(), acc1.data());
    for (int i = 0; i < c.num_tokens; ++i) {
      std::vector<float> max2(max0.begin() + i * c.group, max0.begin() + (i + 1) * c.group);
      std::vector<float> sum2(sum0.begin() + i * c.group, sum0.begin() + (i + 1) * c.group);
      std::vector<float> acc2(acc0.begin() + static_cast<int64_t>(i) * c.group * c.head_size,
                              acc0.begin() + static_cast<int64_t>(i + 1) * c.group * c.head_size);
      if (visible[i] > 0) {
        std::vector<float> one_scores(static_cast<size_t>(c.group) * visible[i]);
        kernels::attention_block_update(queries.data() + i * token_stride, c.group, c.head_size,
                                        scale, visible[i], keys_by_dimension.data(), c.span,
                                        values.data(), one_scores.data(), max2.data(),
                                        sum2.data(), acc2.data());
      }
      const std::string where = "tokens " + std::to_string(c.num_tokens) + " group " +
                                std::to_string(c.group) + " head " + std::to_string(c.head_size) +
                                " token " + std::to_string(i);
      EXPECT_EQ(0, std::memcmp(max2.data(), max1.data() + i * c.group, c.group * sizeof(float)))
          << where;
      EXPECT_EQ(0, std::memcmp(sum2.data(), sum1.data() + i * c.group, c.group * sizeof(float)))
          << where;
      const float* acc_row = acc1.data() + static_cast<int64_t>(i) * c.group * c.head_size;
      EXPECT_EQ(0, std::memcmp(acc2.data(), acc_row, acc2.size() * sizeof(float)))
          << where;
    }
  }
}

// The AVX-512 and AVX2 kernels and the portable one give every row the same bits: odd head sizes
// (masked vectors, or the portable fallback at AVX2), spans that are not whole vectors, partial
// and empty visibility, row counts that leave every remainder of the 6- and 4-row tiles, and a
// state carried in from an earlier span.
// ... and so do the kernels reading keys and values as f16 bits (an f16 cache in place), given
// the same values widened to f32 by the others.
class AttentionLevelTest : public testing::TestWithParam<kernels::KernelLevel> {};

struct LevelCase {
  int num_tokens, group, head_size, span;
};

// How many of the span's positions each token sees: 0: all; 1: causal, the first tokens seeing
// none; 2: scattered counts.
std::vector<int> visible_counts(int pattern, const LevelCase& c, std::mt19937& rng) {
  std::vector<int> visible(c.num_tokens);
  for (int i = 0; i < c.num_tokens; ++i) {
    visible[i] = pattern == 0   ? c.span
                 : pattern == 1 ? std::clamp(c.span - c.num_tokens + i - 1, 0, c.span)
                                : static_cast<int>(rng() % (c.span + 1));
  }
  return visible;
}

TEST_P(AttentionLevelTest, MatchesPortableBitForBit) {
  const kernels::KernelLevel level = GetParam();
  if (!kernels::kernel_level_available(level)) {
    GTEST_SKIP() << "this CPU lacks the level";
  }
  std::mt19937 rng(23);
  std::normal_distribution<float> normal;
  int checked = 0;
  int checked_f16 = 0;
  for (const LevelCase c : {LevelCase{16, 3, 64, 128}, LevelCase{1, 3, 64, 128},
                            LevelCase{1, 8, 128, 7}, LevelCase{7, 4, 128, 100},
                            LevelCase{5, 1, 80, 33}, LevelCase{9, 2, 14, 40},
                            LevelCase{11, 1, 96, 200}, LevelCase{3, 5, 48, 17},
                            LevelCase{2, 7, 16, 1}, LevelCase{13, 3, 112, 64},
                            LevelCase{4, 3, 60, 127}, LevelCase{2, 2, 200, 63}}) {
    const int64_t token_stride = static_cast<int64_t>(c.group) * c.head_size + 5;
    std::vector<float> queries(static_cast<size_t>(c.num_tokens) * token_stride);
    // Key rows padded past the span: the kernel may only read the first `span` positions.
    const int64_t key_stride = c.span + 3;
    std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * key_stride);
    std::vector<float> values(static_cast<size_t>(c.span) * c.head_size);
    for (float& x : queries) x = normal(rng) * 2.0f;
    // Values an f16 cache can hold, and their f16 bits for the in-place kernel in groups of 16
    // positions as a paged cache keeps them: the groups stored in reverse order, key rows 16
    // apart, and a last group's positions past the span NaN (they must not change a result).
    for (float& x : keys_by_dimension) x = round_to_f16(normal(rng));
    for (float& x : values) x = round_to_f16(normal(rng));
    const int group_positions = kernels::kAttentionGroupPositions;
    const int num_groups = (c.span + group_positions - 1) / group_positions;
    const int64_t group_elements = static_cast<int64_t>(c.head_size) * group_positions;
    const uint16_t f16_nan = 0x7e00;
    std::vector<uint16_t> keys_f16(num_groups * group_elements, f16_nan);
    std::vector<uint16_t> values_f16(keys_f16.size(), f16_nan);
    std::vector<const uint16_t*> key_groups(num_groups);
    std::vector<const uint16_t*> value_groups(num_groups);
    for (int g = 0; g < num_groups; ++g) {
      const int64_t at = (num_groups - 1 - g) * group_elements;
      key_groups[g] = keys_f16.data() + at;
      value_groups[g] = values_f16.data() + at;
      for (int i = 0; i < group_positions && g * group_positions + i < c.span; ++i) {
        const int p = g * group_positions + i;
        for (int d = 0; d < c.head_size; ++d) {
          keys_f16[at + d * group_positions + i] =
              f32_to_f16(keys_by_dimension[d * key_stride + p]);
          values_f16[at + i * c.head_size + d] =
              f32_to_f16(values[static_cast<size_t>(p) * c.head_size + d]);
        }
      }
    }
    for (int pattern = 0; pattern < 3; ++pattern) {
      const std::vector<int> visible = visible_counts(pattern, c, rng);
      const int rows = c.num_tokens * c.group;
      std::vector<float> max0(rows), sum0(rows), acc0(static_cast<size_t>(rows) * c.head_size);
      for (int r = 0; r < rows; ++r) {
        max0[r] = r % 4 == 0 ? -INFINITY : normal(rng);  // some rows start fresh
        sum0[r] = r % 4 == 0 ? 0.0f : 1.0f + std::fabs(normal(rng));
      }
      for (size_t i = 0; i < acc0.size(); ++i) {
        acc0[i] = (i / c.head_size) % 4 == 0 ? 0.0f : normal(rng);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
      // The portable kernel, the level's on f32, the level's on f16 bits where it reads them.
      const bool reads_f16 = kernels::attention_reads_f16_at_level(level, c.head_size);
      const int variants = reads_f16 ? 3 : 2;
      std::vector<float> results[3][3];
      const kernels::KernelLevel levels[2] = {kernels::KernelLevel::kReference, level};
      for (int l = 0; l < variants; ++l) {
        std::vector<float> max1 = max0, sum1 = sum0, acc1 = acc0;
        // Scores: exactly the visible part of each row is the kernel's to use; the rows are
        // packed with a stride of `span`, and nothing beyond the last row may be written.
        std::vector<float> scores(static_cast<size_t>(rows) * c.span);
        if (l < 2) {
          kernels::attention_span_update_at_level(
              levels[l], queries.data(), token_stride, c.num_tokens, c.group, c.head_size, scale,
              visible.data(), keys_by_dimension.data(), key_stride, values.data(), scores.data(),
              c.span, max1.data(), sum1.data(), acc1.data());
        } else {
          kernels::attention_span_update_f16_at_level(
              level, queries.data(), token_stride, c.num_tokens, c.group, c.head_size, scale,
              visible.data(), key_groups.data(), group_positions, value_groups.data(),
              scores.data(), c.span, max1.data(), sum1.data(), acc1.data());
        }
        results[l][0] = max1;
        results[l][1] = sum1;
        results[l][2] = acc1;
      }
      const std::string where = "tokens " + std::to_string(c.num_tokens) + " group " +
                                std::to_string(c.group) + " head " + std::to_string(c.head_size) +
                                " span " + std::to_string(c.span) + " pattern " +
                                std::to_string(pattern);
      for (int l = 1; l < variants; ++l) {
        for (int part = 0; part < 3; ++part) {
          ASSERT_EQ(results[0][part].size(), results[l][part].size());
          EXPECT_EQ(0, std::memcmp(results[0][part].data(), results[l][part].data(),
                                   results[0][part].size() * sizeof(float)))
              << where << " part " << part << (l == 2 ? " (f16 in place)" : "");
        }
      }
      ++checked;
      checked_f16 += reads_f16;
    }
  }
  EXPECT_EQ(checked, 36);
  // Every head size at AVX-512; at AVX2 the multiples of 8 (all but 14 and 60).
  EXPECT_EQ(checked_f16, level >= kernels::KernelLevel::kAvx512 ? 36 : 30);
}

// The kernels reading q8 in place (int8 keys in rows of 4 dimensions, values in rows, scales
// apart, in groups of 16 positions as both caches keep them) give every row the portable q8
// kernel's bits, and stay close to exact attention over the same keys and values widened to f32
// (the query's own quantization is the difference).
TEST_P(AttentionLevelTest, Q8InPlaceMatchesPortableBitForBit) {
  const kernels::KernelLevel level = GetParam();
  if (!kernels::kernel_level_available(level)) {
    GTEST_SKIP() << "this CPU lacks the level";
  }
  std::mt19937 rng(29);
  std::normal_distribution<float> normal;
  int checked = 0;
  double worst = 0, total = 0;
  int64_t compared = 0;
  for (const LevelCase c : {LevelCase{16, 3, 64, 128}, LevelCase{1, 3, 64, 128},
                            LevelCase{1, 8, 128, 7}, LevelCase{7, 4, 128, 100},
                            LevelCase{11, 1, 96, 200}, LevelCase{3, 5, 32, 17},
                            LevelCase{2, 2, 192, 63}, LevelCase{13, 6, 256, 33}}) {
    ASSERT_TRUE(kernels::attention_reads_q8_at_level(level, c.head_size));
    const int64_t token_stride = static_cast<int64_t>(c.group) * c.head_size + 5;
    std::vector<float> queries(static_cast<size_t>(c.num_tokens) * token_stride);
    for (float& x : queries) x = normal(rng) * 2.0f;
    // Each position's key and value rows quantized; the f32 copies are what they read back as.
    const int group_positions = kernels::kAttentionGroupPositions;
    const int num_groups = (c.span + group_positions - 1) / group_positions;
    const int scales_per_row = c.head_size / kernels::kQ8Group;
    const int64_t key_stride = c.span + 3;
    std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * key_stride);
    std::vector<float> values(static_cast<size_t>(c.span) * c.head_size);
    // Groups stored in reverse order; positions past the span hold extreme bytes and NaN scales
    // (they must not change a result).
    const uint16_t f16_nan = 0x7e00;
    const int64_t group_elements = static_cast<int64_t>(c.head_size) * group_positions;
    const int64_t group_scales = static_cast<int64_t>(scales_per_row) * group_positions;
    std::vector<int8_t> keys_q8(num_groups * group_elements, -128);
    std::vector<int8_t> values_q8(keys_q8.size(), 127);
    std::vector<uint16_t> key_scales(num_groups * group_scales, f16_nan);
    std::vector<uint16_t> value_scales(key_scales.size(), f16_nan);
    std::vector<const int8_t*> key_groups(num_groups), value_groups(num_groups);
    std::vector<const uint16_t*> key_scale_groups(num_groups), value_scale_groups(num_groups);
    std::vector<float> row(c.head_size), widened(c.head_size);
    std::vector<int8_t> q(c.head_size);
    std::vector<uint16_t> scales(scales_per_row);
    for (int g = 0; g < num_groups; ++g) {
      const int reversed = num_groups - 1 - g;
      key_groups[g] = keys_q8.data() + reversed * group_elements;
      value_groups[g] = values_q8.data() + reversed * group_elements;
      key_scale_groups[g] = key_scales.data() + reversed * group_scales;
      value_scale_groups[g] = value_scales.data() + reversed * group_scales;
      for (int i = 0; i < group_positions && g * group_positions + i < c.span; ++i) {
        const int p = g * group_positions + i;
        for (int which = 0; which < 2; ++which) {
          for (float& x : row) x = normal(rng) * (which == 0 ? 1.0f : 3.0f);
          kernels::f32_to_q8_row(row.data(), q.data(), scales.data(), c.head_size);
          kernels::q8_to_f32_row(q.data(), scales.data(), widened.data(), c.head_size);
          for (int d = 0; d < c.head_size; ++d) {
            if (which == 0) {
              keys_q8[reversed * group_elements + kernels::q8_key_index(i, d, group_positions)] =
                  q[d];
              keys_by_dimension[d * key_stride + p] = widened[d];
            } else {
              values_q8[reversed * group_elements + i * c.head_size + d] = q[d];
              values[static_cast<size_t>(p) * c.head_size + d] = widened[d];
            }
          }
          for (int s = 0; s < scales_per_row; ++s) {
            if (which == 0) {
              key_scales[reversed * group_scales + s * group_positions + i] = scales[s];
            } else {
              value_scales[reversed * group_scales + i * scales_per_row + s] = scales[s];
            }
          }
        }
      }
    }
    const kernels::Q8SpanGroups span{key_groups.data(), key_scale_groups.data(), group_positions,
                                     value_groups.data(), value_scale_groups.data()};
    for (int pattern = 0; pattern < 3; ++pattern) {
      const std::vector<int> visible = visible_counts(pattern, c, rng);
      const int rows = c.num_tokens * c.group;
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
      std::vector<int8_t> q8_queries(static_cast<size_t>(rows) * c.head_size);
      std::vector<float> q8_query_scales(static_cast<size_t>(rows) * scales_per_row);
      kernels::quantize_queries_q8(queries.data(), token_stride, c.num_tokens, c.group,
                                   c.head_size, scale, q8_queries.data(), q8_query_scales.data());
      // The portable q8 kernel, the level's, and exact attention on the widened span.
      std::vector<float> results[3][3];
      for (int l = 0; l < 3; ++l) {
        std::vector<float> max1(rows, -INFINITY), sum1(rows, 0.0f);
        std::vector<float> acc1(static_cast<size_t>(rows) * c.head_size, 0.0f);
        std::vector<float> scores(static_cast<size_t>(rows) * c.span);
        if (l < 2) {
          kernels::attention_span_update_q8_at_level(
              l == 0 ? kernels::KernelLevel::kReference : level,
              {q8_queries.data(), q8_query_scales.data()}, c.num_tokens, c.group, c.head_size,
              visible.data(), span, scores.data(), c.span, max1.data(), sum1.data(),
              acc1.data());
        } else {
          kernels::attention_span_update_at_level(
              kernels::KernelLevel::kReference, queries.data(), token_stride, c.num_tokens,
              c.group, c.head_size, scale, visible.data(), keys_by_dimension.data(), key_stride,
              values.data(), scores.data(), c.span, max1.data(), sum1.data(), acc1.data());
        }
        results[l][0] = max1;
        results[l][1] = sum1;
        results[l][2] = acc1;
      }
      for (int part = 0; part < 3; ++part) {
        EXPECT_EQ(0, std::memcmp(results[0][part].data(), results[1][part].data(),
                                 results[0][part].size() * sizeof(float)))
            << "tokens " << c.num_tokens << " group " << c.group << " head " << c.head_size
            << " span " << c.span << " pattern " << pattern << " part " << part;
      }
      for (int r = 0; r < rows; ++r) {
        if (results[2][1][r] == 0.0f) continue;  // saw nothing
        for (int d = 0; d < c.head_size; ++d) {
          const size_t at = static_cast<size_t>(r) * c.head_size + d;
          const double error = std::fabs(results[1][2][at] / results[1][1][r] -
                                         results[2][2][at] / results[2][1][r]);
          worst = std::max(worst, error);
          total += error;
          ++compared;
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
  // Outputs (weighted means of values of scale 3) close to exact attention over the same cache:
  // the scores of queries of scale 2 (sharp softmaxes over up to 256 dimensions) move by the
  // query's rounding (measured: worst 0.14, mean 0.007).
  const double mean = total / static_cast<double>(compared);
  EXPECT_LT(worst, 0.3);
  EXPECT_LT(mean, 0.03);
  std::printf("q8 vs exact attention on the widened cache: worst %.4f mean %.4f\n", worst, mean);
  EXPECT_FALSE(kernels::attention_reads_q8_at_level(level, 48));  // not whole groups of 32
}

// A q8 span whose values are its keys (MLA's latent, stored once: null values) gives every row
// the bits of the same span with the keys' int8s and scales copied into value rows, at the
// portable level and this one: the latent is read in place, never widened.
TEST_P(AttentionLevelTest, Q8ValuesAreKeysReadFromTheKeys) {
  const kernels::KernelLevel level = GetParam();
  if (!kernels::kernel_level_available(level)) {
    GTEST_SKIP() << "this CPU lacks the level";
  }
  std::mt19937 rng(37);
  std::normal_distribution<float> normal;
  int checked = 0;
  // MLA's shapes: every query head of a token on one latent of 576 (DeepSeek-V3, Kimi-K2) or a
  // smaller one; decode (one token) and prompt runs; spans of whole and partial groups.
  for (const LevelCase c : {LevelCase{1, 16, 576, 128}, LevelCase{1, 8, 576, 37},
                            LevelCase{5, 16, 576, 100}, LevelCase{16, 3, 96, 128},
                            LevelCase{2, 7, 64, 16}}) {
    const int group_positions = kernels::kAttentionGroupPositions;
    const int num_groups = (c.span + group_positions - 1) / group_positions;
    const int scales_per_row = c.head_size / kernels::kQ8Group;
    const int64_t key_stride = group_positions + 16;  // rows longer than a group, as in caches
    const int64_t group_elements = static_cast<int64_t>(c.head_size) * key_stride;
    const int64_t group_scales = static_cast<int64_t>(scales_per_row) * key_stride;
    std::vector<int8_t> keys_q8(num_groups * group_elements, -128);
    std::vector<uint16_t> key_scales(num_groups * group_scales, 0x7e00);  // f16 NaN past the span
    std::vector<int8_t> values_q8(static_cast<size_t>(num_groups) * group_positions * c.head_size);
    std::vector<uint16_t> value_scales(static_cast<size_t>(num_groups) * group_positions *
                                       scales_per_row);
    std::vector<const int8_t*> key_groups(num_groups), value_groups(num_groups);
    std::vector<const uint16_t*> key_scale_groups(num_groups), value_scale_groups(num_groups);
    std::vector<float> row(c.head_size);
    std::vector<int8_t> q(c.head_size);
    std::vector<uint16_t> scales(scales_per_row);
    for (int g = 0; g < num_groups; ++g) {
      const int reversed = num_groups - 1 - g;  // groups anywhere
      key_groups[g] = keys_q8.data() + reversed * group_elements;
      key_scale_groups[g] = key_scales.data() + reversed * group_scales;
      value_groups[g] = values_q8.data() + static_cast<size_t>(g) * group_positions * c.head_size;
      value_scale_groups[g] =
          value_scales.data() + static_cast<size_t>(g) * group_positions * scales_per_row;
      for (int i = 0; i < group_positions && g * group_positions + i < c.span; ++i) {
        for (float& x : row) x = normal(rng) * 2.0f;
        kernels::f32_to_q8_row(row.data(), q.data(), scales.data(), c.head_size);
        for (int d = 0; d < c.head_size; ++d) {
          keys_q8[reversed * group_elements + kernels::q8_key_index(i, d, key_stride)] = q[d];
          values_q8[(static_cast<size_t>(g) * group_positions + i) * c.head_size + d] = q[d];
        }
        for (int s = 0; s < scales_per_row; ++s) {
          key_scales[reversed * group_scales + s * key_stride + i] = scales[s];
          value_scales[(static_cast<size_t>(g) * group_positions + i) * scales_per_row + s] =
              scales[s];
        }
      }
    }
    const kernels::Q8SpanGroups latent{key_groups.data(), key_scale_groups.data(), key_stride,
                                       nullptr, nullptr};
    const kernels::Q8SpanGroups copied{key_groups.data(), key_scale_groups.data(), key_stride,
                                       value_groups.data(), value_scale_groups.data()};
    const int rows = c.num_tokens * c.group;
    std::vector<float> queries(static_cast<size_t>(rows) * c.head_size);
    for (float& x : queries) x = normal(rng);
    std::vector<int8_t> q8_queries(queries.size());
    std::vector<float> q8_query_scales(static_cast<size_t>(rows) * scales_per_row);
    kernels::quantize_queries_q8(queries.data(), static_cast<int64_t>(c.group) * c.head_size,
                                 c.num_tokens, c.group, c.head_size,
                                 1.0f / std::sqrt(static_cast<float>(c.head_size)),
                                 q8_queries.data(), q8_query_scales.data());
    for (int pattern = 0; pattern < 3; ++pattern) {
      const std::vector<int> visible = visible_counts(pattern, c, rng);
      for (const kernels::KernelLevel at : {kernels::KernelLevel::kReference, level}) {
        std::vector<float> results[2][3];
        for (int way = 0; way < 2; ++way) {
          std::vector<float> max1(rows, -INFINITY), sum1(rows, 0.0f);
          std::vector<float> acc1(static_cast<size_t>(rows) * c.head_size, 0.0f);
          std::vector<float> scores(static_cast<size_t>(rows) * c.span);
          kernels::attention_span_update_q8_at_level(
              at, {q8_queries.data(), q8_query_scales.data()}, c.num_tokens, c.group,
              c.head_size, visible.data(), way == 0 ? latent : copied, scores.data(), c.span,
              max1.data(), sum1.data(), acc1.data());
          results[way][0] = max1;
          results[way][1] = sum1;
          results[way][2] = acc1;
        }
        for (int part = 0; part < 3; ++part) {
          EXPECT_EQ(0, std::memcmp(results[0][part].data(), results[1][part].data(),
                                   results[0][part].size() * sizeof(float)))
              << kernels::kernel_level_name(at) << " tokens " << c.num_tokens << " group "
              << c.group << " head " << c.head_size << " span " << c.span << " pattern "
              << pattern << " part " << part;
        }
        EXPECT_TRUE(std::any_of(results[0][1].begin(), results[0][1].end(),
                                [](float sum) { return sum > 0.0f; }));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 30);
}

// An f16 span whose values are its keys (null value groups) gives every row the bits of the f32
// kernel on the same keys widened, used as values too: MLA's latent read in place.
TEST_P(AttentionLevelTest, F16ValuesAreKeysReadFromTheKeys) {
  const kernels::KernelLevel level = GetParam();
  if (!kernels::kernel_level_available(level)) {
    GTEST_SKIP() << "this CPU lacks the level";
  }
  std::mt19937 rng(41);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (const LevelCase c : {LevelCase{1, 16, 576, 128}, LevelCase{1, 8, 576, 37},
                            LevelCase{5, 16, 576, 100}, LevelCase{16, 3, 96, 128},
                            LevelCase{2, 7, 40, 16}, LevelCase{3, 2, 20, 50}}) {
    if (!kernels::attention_reads_f16_at_level(level, c.head_size)) continue;
    const int group_positions = kernels::kAttentionGroupPositions;
    const int num_groups = (c.span + group_positions - 1) / group_positions;
    const int64_t key_stride = group_positions + 16;  // rows longer than a group, as in caches
    const int64_t group_elements = static_cast<int64_t>(c.head_size) * key_stride;
    std::vector<uint16_t> keys_f16(num_groups * group_elements, 0x7e00);  // NaN past the span
    std::vector<const uint16_t*> key_groups(num_groups);
    std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * c.span);
    std::vector<float> values(static_cast<size_t>(c.span) * c.head_size);
    for (int g = 0; g < num_groups; ++g) {
      const int reversed = num_groups - 1 - g;
      key_groups[g] = keys_f16.data() + reversed * group_elements;
      for (int i = 0; i < group_positions && g * group_positions + i < c.span; ++i) {
        const int p = g * group_positions + i;
        for (int d = 0; d < c.head_size; ++d) {
          const uint16_t half = f32_to_f16(normal(rng));
          keys_f16[reversed * group_elements + d * key_stride + i] = half;
          keys_by_dimension[static_cast<size_t>(d) * c.span + p] = f16_to_f32(half);
          values[static_cast<size_t>(p) * c.head_size + d] = f16_to_f32(half);
        }
      }
    }
    const int rows = c.num_tokens * c.group;
    const int64_t token_stride = static_cast<int64_t>(c.group) * c.head_size;
    std::vector<float> queries(static_cast<size_t>(rows) * c.head_size);
    for (float& x : queries) x = normal(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
    for (int pattern = 0; pattern < 3; ++pattern) {
      const std::vector<int> visible = visible_counts(pattern, c, rng);
      std::vector<float> results[2][3];
      for (int way = 0; way < 2; ++way) {
        std::vector<float> max1(rows, -INFINITY), sum1(rows, 0.0f);
        std::vector<float> acc1(static_cast<size_t>(rows) * c.head_size, 0.0f);
        std::vector<float> scores(static_cast<size_t>(rows) * c.span);
        if (way == 0) {
          kernels::attention_span_update_f16_at_level(
              level, queries.data(), token_stride, c.num_tokens, c.group, c.head_size, scale,
              visible.data(), key_groups.data(), key_stride, nullptr, scores.data(), c.span,
              max1.data(), sum1.data(), acc1.data());
        } else {
          kernels::attention_span_update_at_level(
              level, queries.data(), token_stride, c.num_tokens, c.group, c.head_size, scale,
              visible.data(), keys_by_dimension.data(), c.span, values.data(), scores.data(),
              c.span, max1.data(), sum1.data(), acc1.data());
        }
        results[way][0] = max1;
        results[way][1] = sum1;
        results[way][2] = acc1;
      }
      for (int part = 0; part < 3; ++part) {
        EXPECT_EQ(0, std::memcmp(results[0][part].data(), results[1][part].data(),
                                 results[0][part].size() * sizeof(float)))
            << "tokens " << c.num_tokens << " group " << c.group << " head " << c.head_size
            << " span " << c.span << " pattern " << pattern << " part " << part;
      }
      ++checked;
    }
  }
  // Every case at AVX-512; at AVX2 the heads of multiples of 8 (not 20).
  EXPECT_EQ(checked, level >= kernels::KernelLevel::kAvx512 ? 18 : 15);
}

// Queries are quantized as convert.h's q8 rows are (llama.cpp's Q8_0) but with f32 scales and
// halves rounded to even: each value within half a step of the query times the scale.
TEST(AttentionKernelTest, QueriesQuantizedPer32Dimensions) {
  std::mt19937 rng(31);
  std::normal_distribution<float> normal;
  const int head_size = 96, group = 2, tokens = 3;
  const int64_t stride = group * head_size + 7;
  std::vector<float> queries(tokens * stride);
  for (float& x : queries) x = normal(rng) * 4.0f;
  for (int d = 32; d < 64; ++d) queries[d] = 0.0f;  // a zero group: scale 0, values 0
  std::vector<int8_t> values(tokens * group * head_size);
  std::vector<float> scales(tokens * group * 3);
  const float scale = 0.125f;
  kernels::quantize_queries_q8(queries.data(), stride, tokens, group, head_size, scale,
                               values.data(), scales.data());
  for (int row = 0; row < tokens * group; ++row) {
    for (int g = 0; g < 3; ++g) {
      float amax = 0;
      for (int d = g * 32; d < g * 32 + 32; ++d) {
        amax = std::max(amax, std::fabs(queries[(row / group) * stride + (row % group) * head_size + d] * scale));
      }
      ASSERT_EQ(scales[row * 3 + g], amax / 127.0f);
      for (int d = g * 32; d < g * 32 + 32; ++d) {
        const float x = queries[(row / group) * stride + (row % group) * head_size + d] * scale;
        const int8_t q = values[row * head_size + d];
        if (amax == 0) {
          ASSERT_EQ(q, 0);
          continue;
        }
        ASSERT_EQ(q, static_cast<int8_t>(std::nearbyint(x * (1.0f / (amax / 127.0f)))));
        ASSERT_LE(std::fabs(q * scales[row * 3 + g] - x), scales[row * 3 + g] * 0.5001f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionLevelTest,
                         testing::Values(kernels::KernelLevel::kAvx2,
                                         kernels::KernelLevel::kAvx512),
                         [](const testing::TestParamInfo<kernels::KernelLevel>& info) {
                           return std::string(kernels::kernel_level_name(info.param));
                         });

}  // namespace
}  // namespace tachyon
