// The llama.cpp-arithmetic kernels (--numerics llama.cpp). Bit-identity with llama.cpp itself
// is checked end to end against recorded llama.cpp output (tests/cli/llamacpp_reference_test.py);
// here each kernel is checked to compute what it claims (against tachyon's own kernels and
// double-precision oracles) and its portable and AVX2 paths to give the same bits.
#include "kernels/cpu/llamacpp_arithmetic.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/rope.h"
#include "kernels/reference/matmul_reference.h"

namespace tachyon {
namespace {

namespace llamacpp = kernels::llamacpp;

// Random Q4_1 or Q8_0 rows: random quants, scales near 2^-6 (minimums near 2^-3 for Q4_1).
std::vector<uint8_t> random_weights(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int block_bytes = type == DType::kQ4_1 ? 20 : 34;
  const int64_t blocks = rows * cols / 32;
  std::vector<uint8_t> bytes(blocks * block_bytes);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t d = f32_to_f16(std::ldexp(1.0f + 0.5f * unit(rng), -6));
    std::memcpy(bytes.data() + b * block_bytes, &d, 2);
    if (type == DType::kQ4_1) {
      const uint16_t m = f32_to_f16(std::ldexp(unit(rng), -3));
      std::memcpy(bytes.data() + b * block_bytes + 2, &m, 2);
    } else {
      // Q8_0 quants from ggml's quantizer never reach -128; keep the data that way.
      for (int i = 2; i < 34; ++i) {
        if (bytes[b * block_bytes + i] == 0x80) bytes[b * block_bytes + i] = 0x81;
      }
    }
  }
  return bytes;
}

std::vector<float> normal_values(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

TEST(LlamaCppArithmeticTest, SupportsQ4_1AndQ8_0Only) {
  EXPECT_TRUE(llamacpp::matmul_supports(DType::kQ4_1));
  EXPECT_TRUE(llamacpp::matmul_supports(DType::kQ8_0));
  for (DType type : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    EXPECT_FALSE(llamacpp::matmul_supports(type)) << dtype_name(type);
  }
}

// Both paths give the same bits, and the product is the one tachyon's reference kernel computes
// (same quantized activations) up to f32 summation order.
TEST(LlamaCppArithmeticTest, MatmulPathsAgreeAndComputeTheProduct) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (DType type : {DType::kQ4_1, DType::kQ8_0}) {
    for (int64_t rows : {1, 7, 37}) {
      for (int64_t cols : {32, 96, 576}) {
        const std::vector<uint8_t> bytes = random_weights(type, rows, cols, rng);
        const kernels::WeightMatrix w{type, bytes.data(), rows, cols};
        for (int64_t tokens : {1, 3}) {
          const std::vector<float> x = normal_values(tokens * cols, rng);
          std::vector<float> portable(tokens * rows), simd(tokens * rows), oracle(tokens * rows);
          llamacpp::matmul_at_level(kernels::KernelLevel::kReference, w, x.data(), tokens,
                                    portable.data(), pool);
          llamacpp::matmul_at_level(kernels::KernelLevel::kAvx2, w, x.data(), tokens,
                                    simd.data(), pool);
          EXPECT_EQ(portable, simd) << dtype_name(type) << " " << rows << "x" << cols;
          ASSERT_TRUE(reference::matmul(type, bytes.data(), rows, cols, x.data(), tokens,
                                        oracle.data()).ok());
          for (size_t i = 0; i < oracle.size(); ++i) {
            // f32 sums in another order: a few roundings of partial sums of size ~cols.
            EXPECT_NEAR(portable[i], oracle[i], 2e-6f * static_cast<float>(cols))
                << dtype_name(type) << " " << rows << "x" << cols << " output " << i;
          }
        }
      }
    }
  }
}

TEST(LlamaCppArithmeticTest, ElementwiseOperationsMatchTachyonsKernels) {
  std::mt19937 rng(12);
  for (int size : {1, 15, 16, 17, 576, 1536}) {
    const std::vector<float> x = normal_values(size, rng, 3.0f);
    const std::vector<float> up = normal_values(size, rng);
    std::vector<float> weight = normal_values(size, rng, 0.1f);
    for (float& v : weight) v += 1.0f;
    std::vector<float> ours(size), native(size);
    llamacpp::rms_norm(x.data(), weight.data(), size, 1e-5f, ours.data());
    kernels::rms_norm(x.data(), weight.data(), size, 1e-5f, native.data());
    for (int i = 0; i < size; ++i) {
      EXPECT_NEAR(ours[i], native[i], 2e-6f * (1.0f + std::abs(native[i]))) << "rms_norm " << i;
    }
    // SwiGLU: whole vectors of 16 through the polynomial exp (a few ulp), the rest libm's.
    std::vector<float> gate = x;
    for (int i = 0; i < size; i += 5) gate[i] *= 40.0f;  // silu's flat and linear ends
    llamacpp::swiglu(gate.data(), up.data(), size, ours.data());
    kernels::swiglu(gate.data(), up.data(), size, native.data());
    for (int i = 0; i < size; ++i) {
      EXPECT_NEAR(ours[i], native[i], 2e-6f * (1.0f + std::abs(native[i])))
          << "swiglu gate " << gate[i];
    }
  }
  // The polynomial exp's ends: exp(-x) overflowing gives silu = -0, not NaN.
  const float gate[16] = {-200.0f, -100.0f, -88.0f, 100.0f, 200.0f, 0.0f, -0.0f, 1e-30f,
                          -1e-30f, 5.0f, -5.0f, 20.0f, -20.0f, 87.0f, -87.0f, 1.0f};
  float up[16], out[16];
  std::fill(up, up + 16, 2.0f);
  llamacpp::swiglu(gate, up, 16, out);
  for (int i = 0; i < 16; ++i) {
    const double expected = 2.0 * gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
    EXPECT_NEAR(out[i], expected, 1e-6 * (1.0 + std::abs(expected))) << "gate " << gate[i];
  }
}

TEST(LlamaCppArithmeticTest, RopeMatchesTachyonsKernel) {
  std::mt19937 rng(13);
  const int head_size = 64, heads = 3;
  std::vector<float> cos(head_size / 2), sin(head_size / 2);
  for (int j = 0; j < head_size / 2; ++j) {
    const float angle = 37.0f * std::pow(10000.0f, -2.0f * j / head_size);
    cos[j] = std::cos(angle);
    sin[j] = std::sin(angle);
  }
  for (bool adjacent : {true, false}) {
    std::vector<float> ours = normal_values(heads * head_size, rng);
    std::vector<float> native = ours;
    llamacpp::rope_rotate(ours.data(), heads, head_size, cos.data(), sin.data(), adjacent);
    kernels::rope_rotate(native.data(), heads, head_size, cos.data(), sin.data(), adjacent);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_NEAR(ours[i], native[i], 1e-6f * (1.0f + std::abs(native[i]))) << i;
    }
  }
}

// softmax(q·K·scale)·V in double.
std::vector<double> exact_attention(const std::vector<float>& q, const std::vector<float>& keys,
                                    const std::vector<float>& values, int count, int head_size,
                                    float scale) {
  std::vector<double> scores(count);
  double max = -INFINITY;
  for (int p = 0; p < count; ++p) {
    double dot = 0.0;
    for (int d = 0; d < head_size; ++d) dot += double(q[d]) * keys[p * head_size + d];
    scores[p] = dot * scale;
    max = std::max(max, scores[p]);
  }
  double sum = 0.0;
  std::vector<double> out(head_size, 0.0);
  for (int p = 0; p < count; ++p) {
    const double weight = std::exp(scores[p] - max);
    sum += weight;
    for (int d = 0; d < head_size; ++d) out[d] += weight * values[p * head_size + d];
  }
  for (double& v : out) v /= sum;
  return out;
}

TEST(LlamaCppArithmeticTest, AttentionPathsComputeSoftmaxAttention) {
  std::mt19937 rng(14);
  for (int head_size : {64, 80, 128}) {
    for (int count : {1, 2, 63, 64, 65, 300}) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_size));
      const std::vector<float> q = normal_values(head_size, rng, 2.0f);
      std::vector<float> keys = normal_values(count * head_size, rng, 2.0f);
      std::vector<float> values = normal_values(count * head_size, rng);
      for (float& v : keys) v = f16_to_f32(f32_to_f16(v));  // the cache holds f16
      for (float& v : values) v = f16_to_f32(f32_to_f16(v));
      const std::vector<double> exact = exact_attention(q, keys, values, count, head_size, scale);
      std::vector<float> row(head_size), tiled(head_size), split(head_size), whole(head_size);
      llamacpp::attention_row(q.data(), keys.data(), values.data(), count, head_size, scale,
                              row.data());
      llamacpp::attention_row_tiled(q.data(), keys.data(), values.data(), count, head_size,
                                    scale, tiled.data());
      llamacpp::attention_row_split(q.data(), keys.data(), values.data(), count, head_size,
                                    scale, 128, split.data());
      llamacpp::attention_row_split(q.data(), keys.data(), values.data(), count, head_size,
                                    scale, count, whole.data());
      // One chunk holding every position is the unsplit path, bit for bit.
      EXPECT_EQ(whole, row) << "head " << head_size << " count " << count;
      for (int d = 0; d < head_size; ++d) {
        // f16 query and f16 accumulation (rounded at every position) cost ~1e-3 relative.
        EXPECT_NEAR(row[d], exact[d], 1e-2) << "row, head " << head_size << " count " << count;
        EXPECT_NEAR(split[d], exact[d], 1e-2) << "split, head " << head_size << " count " << count;
        EXPECT_NEAR(tiled[d], exact[d], 1e-5) << "tiled, head " << head_size << " count " << count;
      }
    }
  }
}

TEST(LlamaCppArithmeticTest, AttentionCellsAsLlamaCppCountsThem) {
  EXPECT_EQ(llamacpp::attention_cells(1, 4096), 256);
  EXPECT_EQ(llamacpp::attention_cells(256, 4096), 256);
  EXPECT_EQ(llamacpp::attention_cells(257, 4096), 512);
  EXPECT_EQ(llamacpp::attention_cells(1000, 1024), 1024);
  EXPECT_EQ(llamacpp::attention_cells(100, 128), 128);
}

}  // namespace
}  // namespace tachyon
