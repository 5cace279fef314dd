// The KV cache's row conversions: q8 is llama.cpp's Q8_0 arithmetic (the reference quantizer,
// the gguf package's byte for byte) with the scales kept apart, read back exactly.
#include "kernels/cpu/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kernels/reference/block_layouts.h"
#include "kernels/reference/dequantize.h"
#include "kernels/reference/quantize_weights.h"

namespace tachyon {
namespace {

TEST(ConvertTest, Q8RowsAreQ8_0Blocks) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int n = 32 * 9;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = normal(rng) * (1 + i / 32);  // a different range per group
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;                      // an all-zero group
  x[100] = 1e4f;                                                  // an outlier
  std::vector<int8_t> q(n);
  std::vector<uint16_t> scales(n / kernels::kQ8Group);
  kernels::f32_to_q8_row(x.data(), q.data(), scales.data(), n);
  std::vector<reference::BlockQ8_0> blocks(n / 32);
  ASSERT_TRUE(reference::quantize_weights(DType::kQ8_0, x.data(), n, blocks.data()).ok());
  for (int g = 0; g < n / 32; ++g) {
    EXPECT_EQ(scales[g], blocks[g].d) << "group " << g;
    EXPECT_EQ(0, std::memcmp(q.data() + g * 32, blocks[g].qs, 32)) << "group " << g;
  }
  // Read back: the reference dequantizer's values, bit for bit, close to the input.
  std::vector<float> back(n), expected(n);
  kernels::q8_to_f32_row(q.data(), scales.data(), back.data(), n);
  ASSERT_TRUE(reference::dequantize(DType::kQ8_0, blocks.data(), expected.data(), n).ok());
  EXPECT_EQ(0, std::memcmp(back.data(), expected.data(), n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    const float amax =
        *std::max_element(x.begin() + i / 32 * 32, x.begin() + i / 32 * 32 + 32,
                          [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    EXPECT_LE(std::fabs(back[i] - x[i]), std::fabs(amax) / 127.0f * 0.6f + 1e-6f) << i;
  }
}

}  // namespace
}  // namespace tachyon
