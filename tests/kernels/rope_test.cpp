// kernels::rope_rotate (the variant this CPU runs) against its double-precision oracle.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reference/rope.h"

namespace tachyon {
namespace {

TEST(RopeKernelTest, MatchesReferenceInBothLayouts) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> angle(-100.0f, 100.0f);
  for (bool adjacent : {true, false}) {
    for (int head_size : {2, 16, 64, 128}) {
      for (int num_heads : {1, 3, 9}) {
        std::vector<float> cos(head_size / 2), sin(head_size / 2);
        for (int j = 0; j < head_size / 2; ++j) {
          const float a = angle(rng);
          cos[j] = std::cos(a);
          sin[j] = std::sin(a);
        }
        std::vector<float> heads(num_heads * head_size);
        for (float& v : heads) v = normal(rng) * 5.0f;
        std::vector<float> expected = heads;
        kernels::rope_rotate(heads.data(), num_heads, head_size, cos.data(), sin.data(), adjacent);
        reference::rope_rotate(expected.data(), num_heads, head_size, cos.data(), sin.data(),
                               adjacent);
        for (size_t i = 0; i < heads.size(); ++i) {
          EXPECT_NEAR(heads[i], expected[i], 2e-6f * std::max(1.0f, std::abs(expected[i])))
              << (adjacent ? "adjacent" : "neox") << " head_size " << head_size << " index " << i;
        }
      }
    }
  }
}

// A rotation keeps each pair's length: checks the pairing, not just agreement.
TEST(RopeKernelTest, PreservesPairNorms) {
  const int head_size = 8;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> cos = {0.6f, 0.0f, 1.0f, -1.0f};
  const std::vector<float> sin = {0.8f, 1.0f, 0.0f, 0.0f};
  std::vector<float> neox = x;
  kernels::rope_rotate(x.data(), 1, head_size, cos.data(), sin.data(), true);
  EXPECT_FLOAT_EQ(x[0], 1 * 0.6f - 2 * 0.8f);
  EXPECT_FLOAT_EQ(x[1], 2 * 0.6f + 1 * 0.8f);
  EXPECT_FLOAT_EQ(x[2], -4.0f);  // 90 degrees: (3, 4) -> (-4, 3)
  EXPECT_FLOAT_EQ(x[3], 3.0f);
  kernels::rope_rotate(neox.data(), 1, head_size, cos.data(), sin.data(), false);
  EXPECT_FLOAT_EQ(neox[0], 1 * 0.6f - 5 * 0.8f);  // pairs (j, j + 4)
  EXPECT_FLOAT_EQ(neox[4], 5 * 0.6f + 1 * 0.8f);
  EXPECT_FLOAT_EQ(neox[1], -6.0f);
  EXPECT_FLOAT_EQ(neox[5], 2.0f);
}

}  // namespace
}  // namespace tachyon
