// kernels::attention_group (the variant this CPU runs) against the double-precision reference.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reference/attention.h"

namespace tachyon {
namespace {

struct Case {
  int group;
  int head_size;
  int num_positions;
  float query_scale;  // large values make scores far apart: softmax must subtract the max
};

TEST(AttentionKernelTest, MatchesReferenceOnRandomShapes) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  const Case cases[] = {{1, 16, 1, 1.0f},   {3, 64, 2, 1.0f},    {4, 64, 17, 1.0f},
                        {3, 80, 300, 1.0f}, {2, 128, 65, 1.0f},  {1, 32, 1000, 0.1f},
                        {3, 64, 33, 40.0f}, {5, 7 * 2, 9, 3.0f}};
  for (const Case& c : cases) {
    const int stride = c.num_positions + 5;  // a key stride wider than the positions
    std::vector<float> queries(c.group * c.head_size);
    std::vector<float> keys(static_cast<size_t>(c.num_positions) * c.head_size);
    std::vector<float> values(keys.size());
    for (float& q : queries) q = normal(rng) * c.query_scale;
    for (float& k : keys) k = normal(rng);
    for (float& v : values) v = normal(rng);
    std::vector<float> keys_by_dimension(static_cast<size_t>(c.head_size) * stride, NAN);
    for (int p = 0; p < c.num_positions; ++p) {
      for (int d = 0; d < c.head_size; ++d) {
        keys_by_dimension[static_cast<size_t>(d) * stride + p] = keys[static_cast<size_t>(p) * c.head_size + d];
      }
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
    std::vector<float> scores(c.group * c.num_positions);
    std::vector<float> out(queries.size());
    std::vector<float> expected(queries.size());
    kernels::attention_group(queries.data(), c.group, c.head_size, scale, c.num_positions,
                             keys_by_dimension.data(), stride, values.data(), scores.data(),
                             out.data());
    reference::attention_group(queries.data(), c.group, c.head_size, scale, c.num_positions,
                               keys.data(), values.data(), expected.data());
    // The output is a convex combination of value rows: f32 rounding stays far below 1e-4.
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i]));
      EXPECT_NEAR(out[i], expected[i], 1e-4f)
          << "group " << c.group << " head_size " << c.head_size << " positions "
          << c.num_positions << " index " << i;
    }
  }
}

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

}  // namespace
}  // namespace tachyon
