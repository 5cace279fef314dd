// The element-wise kernels (the variant this CPU runs) against their double-precision oracles.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reference/elementwise.h"

namespace tachyon {
namespace {

TEST(ElementwiseKernelTest, RmsNormMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int size : {1, 7, 64, 576, 1000, 4096}) {
    for (float magnitude : {1e-3f, 1.0f, 300.0f}) {
      std::vector<float> x(size), weight(size), out(size), expected(size);
      for (float& v : x) v = normal(rng) * magnitude;
      for (float& v : weight) v = 1.0f + 0.1f * normal(rng);
      kernels::rms_norm(x.data(), weight.data(), size, 1e-5f, out.data());
      reference::rms_norm(x.data(), weight.data(), size, 1e-5f, expected.data());
      for (int i = 0; i < size; ++i) {
        EXPECT_NEAR(out[i], expected[i], 2e-6f * std::max(1.0f, std::abs(expected[i])))
            << "size " << size << " magnitude " << magnitude << " index " << i;
      }
      // In place gives the same.
      std::vector<float> in_place = x;
      kernels::rms_norm(in_place.data(), weight.data(), size, 1e-5f, in_place.data());
      EXPECT_EQ(in_place, out);
    }
  }
}

TEST(ElementwiseKernelTest, AddRmsNormIsAddThenRmsNormBitForBit) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (int size : {1, 7, 15, 16, 17, 576, 2048, 2049}) {
    std::vector<float> x(size), y(size), weight(size);
    for (float& v : x) v = normal(rng) * 30.0f;
    for (float& v : y) v = normal(rng);
    for (float& v : weight) v = 1.0f + 0.1f * normal(rng);
    std::vector<float> separate = x, separate_out(size);
    kernels::add_in_place(separate.data(), y.data(), size);
    kernels::rms_norm(separate.data(), weight.data(), size, 1e-5f, separate_out.data());
    std::vector<float> fused = x, fused_out(size);
    kernels::add_rms_norm(fused.data(), y.data(), weight.data(), size, 1e-5f, fused_out.data());
    EXPECT_EQ(fused, separate) << size;  // the residual, updated
    EXPECT_EQ(fused_out, separate_out) << size;
  }
}

TEST(ElementwiseKernelTest, SwigluAndAddMatchReference) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  for (int64_t size : {1, 15, 16, 17, 1536, 10001}) {
    std::vector<float> gate(size), up(size), out(size), expected(size);
    for (float& v : gate) v = normal(rng) * 6.0f;  // reaches silu's flat and linear ends
    for (float& v : up) v = normal(rng);
    kernels::swiglu(gate.data(), up.data(), size, out.data());
    reference::swiglu(gate.data(), up.data(), size, expected.data());
    for (int64_t i = 0; i < size; ++i) {
      EXPECT_NEAR(out[i], expected[i], 1e-6f * std::max(1.0f, std::abs(expected[i]))) << i;
    }
    std::vector<float> sum = gate;
    kernels::add_in_place(sum.data(), up.data(), size);
    for (int64_t i = 0; i < size; ++i) EXPECT_EQ(sum[i], gate[i] + up[i]);
  }
}

TEST(ElementwiseKernelTest, ScaledSoftmaxMatchesReference) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  for (int64_t size : {1, 2, 15, 16, 17, 100, 1536, 10001}) {
    std::vector<float> x(size);
    for (float& v : x) v = normal(rng) * 8.0f;  // weights from ~1 down to underflow
    if (size > 3) x[size / 2] = -std::numeric_limits<float>::infinity();  // a masked score
    std::vector<float> expected = x;
    reference::scaled_softmax(expected.data(), size, 0.125f);
    std::vector<float> out = x;
    kernels::scaled_softmax(out.data(), size, 0.125f);
    double total = 0;
    for (int64_t i = 0; i < size; ++i) {
      EXPECT_NEAR(out[i], expected[i], 2e-6f * std::max(1e-3f, expected[i])) << size << " " << i;
      total += out[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5) << size;
    if (size > 3) {
      EXPECT_EQ(out[size / 2], 0.0f);
    }
  }
}

TEST(ElementwiseKernelTest, GegluMatchesReference) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal;
  for (int64_t size : {1, 15, 16, 17, 2048, 10001}) {
    std::vector<float> gate(size), up(size), out(size), expected(size);
    for (float& v : gate) v = normal(rng) * 6.0f;  // gelu's flat negative end and linear end
    for (float& v : up) v = normal(rng);
    kernels::geglu(gate.data(), up.data(), size, out.data());
    reference::geglu(gate.data(), up.data(), size, expected.data());
    for (int64_t i = 0; i < size; ++i) {
      EXPECT_NEAR(out[i], expected[i], 2e-6f * std::max(1.0f, std::abs(expected[i]))) << i;
    }
    std::vector<float> in_place = gate;
    kernels::geglu(in_place.data(), up.data(), size, in_place.data());
    EXPECT_EQ(in_place, out);
  }
}

// The first largest value's index, as a scan from -inf keeping strictly greater values finds it.
int64_t scan_argmax(const std::vector<float>& x) {
  int64_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > best_value) {
      best_value = x[i];
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

TEST(ElementwiseKernelTest, ArgmaxIsTheFirstLargestAndSkipsNan) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t size : {1, 2, 15, 16, 17, 33, 1000, 49152, 128256}) {
    std::vector<float> x(static_cast<size_t>(size));
    for (float& v : x) v = normal(rng);
    EXPECT_EQ(kernels::argmax(x.data(), size), scan_argmax(x)) << size;
    // Ties: the first of several equal maxima, wherever they fall (tail included).
    const int64_t last = size - 1;
    x[static_cast<size_t>(last)] = 100.0f;
    x[static_cast<size_t>(last / 2)] = 100.0f;
    EXPECT_EQ(kernels::argmax(x.data(), size), last / 2) << size;
    // NaN never wins, +inf does.
    x[0] = nan;
    EXPECT_EQ(kernels::argmax(x.data(), size), scan_argmax(x)) << size;
    x[static_cast<size_t>(last)] = inf;
    EXPECT_EQ(kernels::argmax(x.data(), size), size == 1 ? 0 : last) << size;
    // Nothing above -inf: 0, even when 0 holds NaN.
    std::fill(x.begin(), x.end(), -inf);
    x[0] = nan;
    EXPECT_EQ(kernels::argmax(x.data(), size), 0) << size;
  }
}

TEST(ElementwiseKernelTest, ApplyTokenMaskRefusesExactlyTheClearBits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int64_t size : {1, 31, 32, 33, 100, 4096, 49157}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<uint32_t> bits(static_cast<size_t>((size + 31) / 32));
      for (uint32_t& word : bits) {
        word = pattern == 0 ? 0u : pattern == 1 ? 0xFFFFFFFFu
               : pattern == 2 ? static_cast<uint32_t>(rng())
                              : (rng() % 3 == 0 ? 0u : rng() % 2 ? 0xFFFFFFFFu : 1u << (rng() % 32));
      }
      std::vector<float> logits(static_cast<size_t>(size));
      for (float& v : logits) v = normal(rng) * 5;
      std::vector<float> expected = logits;
      for (int64_t i = 0; i < size; ++i) {
        if (!((bits[i / 32] >> (i % 32)) & 1u)) expected[i] = -std::numeric_limits<float>::infinity();
      }
      kernels::apply_token_mask(bits.data(), logits.data(), size);
      EXPECT_EQ(logits, expected) << "size " << size << " pattern " << pattern;
    }
  }
}

}  // namespace
}  // namespace tachyon
