// Consistency tests for kernels::matmul: every SIMD level against the scalar reference (bit for
// bit for the types with 8-bit activations, Q4_0..Q8_0 and the K-quants; tight for the float
// types, where only the f32 summation order differs), and the reference against a plain f32
// product of the dequantized weights with the unquantized activations (loose, bounded by the
// 8-bit rounding of the activations).
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_input.h"
#include "kernels/cpu/repacked_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/huge_page_arena.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/reference/block_layouts.h"
#include "kernels/reference/dequantize.h"
#include "kernels/reference/dot_products.h"
#include "kernels/reference/dot_products_k.h"
#include "kernels/reference/matmul_reference.h"
#include "kernels/reference/quantize_activations.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::kernels {
namespace {

using reference::kQ8Block;
using reference::kQ8KBlock;

// A finite f16 with a random sign and mantissa and a biased exponent in [min_exp, max_exp].
uint16_t random_f16(std::mt19937& rng, int min_exp, int max_exp, bool allow_negative) {
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  std::uniform_int_distribution<int> mantissa(0, 1023);
  const int sign = allow_negative ? static_cast<int>(rng() & 1u) : 0;
  return static_cast<uint16_t>((sign << 15) | (exponent(rng) << 10) | mantissa(rng));
}

void put_u16(std::vector<uint8_t>& bytes, size_t offset, uint16_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

// Random weights of `type`, [rows, cols]: random bytes with every scale field replaced by a
// sane finite value (scales near 2^-6, so dequantized weights are O(0.1-1)).
std::vector<uint8_t> random_weights(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(type);
  const size_t num_blocks = static_cast<size_t>(rows * cols / info.block_elements);
  std::vector<uint8_t> bytes(num_blocks * info.block_bytes);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng());
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (size_t b = 0; b < num_blocks; ++b) {
    const size_t base = b * info.block_bytes;
    switch (type) {
      case DType::kF32: {
        const float value = normal(rng);
        std::memcpy(bytes.data() + base, &value, sizeof(value));
        break;
      }
      case DType::kF16:
        put_u16(bytes, base, random_f16(rng, 10, 15, true));  // |w| in [2^-5, 2)
        break;
      case DType::kBF16:
        put_u16(bytes, base, static_cast<uint16_t>(std::bit_cast<uint32_t>(normal(rng)) >> 16));
        break;
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0:
        put_u16(bytes, base, random_f16(rng, 6, 9, true));
        break;
      case DType::kQ4_1:
      case DType::kQ5_1:
        put_u16(bytes, base, random_f16(rng, 6, 9, true));
        put_u16(bytes, base + 2, random_f16(rng, 9, 13, true));
        break;
      case DType::kQ2_K:
        put_u16(bytes, base + offsetof(reference::BlockQ2_K, d), random_f16(rng, 6, 9, true));
        put_u16(bytes, base + offsetof(reference::BlockQ2_K, dmin), random_f16(rng, 6, 9, true));
        break;
      case DType::kQ3_K:
        put_u16(bytes, base + offsetof(reference::BlockQ3_K, d), random_f16(rng, 6, 9, true));
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        put_u16(bytes, base + 0, random_f16(rng, 6, 9, true));
        put_u16(bytes, base + 2, random_f16(rng, 6, 9, true));
        break;
      case DType::kQ6_K:
        put_u16(bytes, base + offsetof(reference::BlockQ6_K, d), random_f16(rng, 4, 7, true));
        break;
      case DType::kQ8_K: {
        const float d = std::ldexp(1.0f + static_cast<float>(rng() % 100) / 100.0f, -7);
        std::memcpy(bytes.data() + base, &d, sizeof(d));
        break;
      }
      default:
        ADD_FAILURE() << "no random generator for " << dtype_name(type);
    }
  }
  return bytes;
}

// Activations, f32 [num_tokens, cols]: mostly N(0, 1), a few outliers, and an all-zero token
// (token 1 when there are several) to exercise the tiny-block path.
std::vector<float> random_activations(int64_t num_tokens, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(num_tokens * cols));
  for (float& value : x) value = normal(rng) * ((rng() % 50 == 0) ? 20.0f : 1.0f);
  if (num_tokens > 1) std::fill(x.begin() + cols, x.begin() + 2 * cols, 0.0f);
  return x;
}

// `file` (which RepackedWeights must support) with its repacked copy in `arena`.
WeightMatrix repacked_copy(const WeightMatrix& file, HugePageArena& arena) {
  WeightMatrix repacked = file;
  uint8_t* packed = arena.allocate(RepackedWeights::packed_bytes(file));
  RepackedWeights::repack_into(file, packed);
  repacked.packed = packed;
  return repacked;
}

std::vector<KernelLevel> simd_levels() {
  std::vector<KernelLevel> levels;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAmx}) {
    if (kernel_level_available(level)) levels.push_back(level);
  }
  return levels;
}

const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};

std::vector<int64_t> cols_for(DType type) {
  const int64_t block = dtype_info(type).block_elements;
  if (block == 1) return {1, 7, 37, 576};  // odd sizes exercise the vector tails
  // Integer K-quant kernels: one super-block, two, and a real model's 2304 (9 super-blocks).
  if (reference::has_q8_k_dot(type)) return {256, 512, 2304};
  return {block, 3 * block};  // one block, several blocks
}

std::string case_name(DType type, KernelLevel level, int64_t rows, int64_t cols, int64_t tokens,
                      int threads) {
  return std::string(dtype_name(type)) + " " + std::string(kernel_level_name(level)) +
         " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
         " tokens=" + std::to_string(tokens) + " threads=" + std::to_string(threads);
}

// |dmin * m_j| of the sub-block holding column c of row r, for Q4_K/Q5_K weights.
double k_min_offset(DType type, const std::vector<uint8_t>& w, size_t row_bytes, int64_t r,
                    int64_t c) {
  const size_t block_bytes = dtype_info(type).block_bytes;
  const uint8_t* block = w.data() + r * row_bytes + (c / kQ8KBlock) * block_bytes;
  static_assert(offsetof(reference::BlockQ4_K, scales) == offsetof(reference::BlockQ5_K, scales));
  uint8_t scales[12];
  std::memcpy(scales, block + offsetof(reference::BlockQ4_K, scales), sizeof(scales));
  uint16_t dmin_bits;
  std::memcpy(&dmin_bits, block + offsetof(reference::BlockQ4_K, dmin), sizeof(dmin_bits));
  const int j = static_cast<int>((c % kQ8KBlock) / 32);
  return std::fabs(f16_to_f32(dmin_bits)) * reference::q4_k_scale_min(scales, j).min;
}

// Per output: sum_c (|w_c| + |m_c|) * |x_c|, where m_c is the offset of c's block for the
// Q8-dot types (their kernels add d*da*sum(q*a) and m*sa separately) and 0 otherwise. Every
// f32 term either kernel adds is at most about this big, so rounding differences are a small
// multiple of eps times it.
std::vector<double> magnitude(DType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                              const std::vector<float>& wf, const std::vector<float>& x,
                              int64_t num_tokens) {
  const size_t row_bytes = WeightMatrix{type, nullptr, rows, cols}.row_bytes();
  std::vector<double> out(static_cast<size_t>(num_tokens * rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> offset(static_cast<size_t>(cols), 0.0);
    if (reference::has_q8_dot(type)) {
      for (int64_t c = 0; c < cols; ++c) {
        offset[c] =
            std::fabs(reference::split_block(type, w.data() + r * row_bytes, c / kQ8Block).m);
      }
    }
    if (type == DType::kQ4_K || type == DType::kQ5_K) {
      // The min term dmin * m_j is summed apart from the scaled term (through bsums).
      for (int64_t c = 0; c < cols; ++c) offset[c] = k_min_offset(type, w, row_bytes, r, c);
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        sum += (std::fabs(wf[r * cols + c]) + offset[c]) * std::fabs(x[t * cols + c]);
      }
      out[t * rows + r] = sum;
    }
  }
  return out;
}

TEST(MatmulTest, SupportsEveryDequantizableType) {
  for (uint32_t id = 0; id < 64; ++id) {
    const std::optional<DTypeInfo> info = dtype_info(id);
    if (!info) continue;
    EXPECT_EQ(matmul_supports(info->type), info->can_dequantize) << info->name;
  }
  for (DType type : kAllTypes) EXPECT_TRUE(matmul_supports(type)) << dtype_name(type);
}

TEST(MatmulTest, ActiveLevelIsAvailable) {
  EXPECT_TRUE(kernel_level_available(active_kernel_level()));
  EXPECT_TRUE(kernel_level_available(KernelLevel::kReference));
}

// SIMD activation quantization is bit-identical to the reference.
TEST(MatmulTest, QuantizeActivationsMatchesReferenceExactly) {
  std::mt19937 rng(7);
  for (int64_t cols : {32, 64, 576, 1536}) {
    const int64_t tokens = 5;
    std::vector<float> x = random_activations(tokens, cols, rng);
    x[3] = 1e-35f;                      // a tiny value in a block of zeros would be zeroed
    x[cols + 5] = 2.5f * (1.0f / 127);  // ties at x * 127 / amax are rare; random data covers it
    const int64_t blocks = tokens * cols / kQ8Block;
    std::vector<int8_t> qs_ref(tokens * cols), qs(tokens * cols);
    std::vector<float> d_ref(blocks), s_ref(blocks), d(blocks), s(blocks);
    reference::quantize_activations_q8(x.data(), tokens, cols, qs_ref.data(), d_ref.data(),
                                       s_ref.data());
    for (KernelLevel level : simd_levels()) {
      SCOPED_TRACE(std::string(kernel_level_name(level)) + " cols=" + std::to_string(cols));
      if (level == KernelLevel::kAvx2) {  // (the amx level quantizes with avx512's code)
        avx2::quantize_activations(x.data(), tokens, cols, qs.data(), d.data(), s.data());
      } else {
        avx512::quantize_activations(x.data(), tokens, cols, qs.data(), d.data(), s.data());
      }
      EXPECT_EQ(qs, qs_ref);
      EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)));
    }
  }
}

TEST(MatmulTest, ReferenceQuantizationRoundsToNearest) {
  float x[32] = {};
  x[0] = 127.0f;  // amax: d = 1, inverse = 1
  x[1] = 2.5f;    // ties go to even
  x[2] = -3.5f;
  x[3] = 0.49f;
  x[4] = -126.6f;
  int8_t qs[32];
  float d = 0.0f;
  float s = 0.0f;
  reference::quantize_row_q8(x, 32, qs, &d, &s);
  EXPECT_EQ(d, 1.0f);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], 2);
  EXPECT_EQ(qs[2], -4);
  EXPECT_EQ(qs[3], 0);
  EXPECT_EQ(qs[4], -127);
  EXPECT_EQ(s, 127.0f + 2 - 4 - 127);
}

class MatmulTypeTest : public testing::TestWithParam<DType> {};

// Each SIMD level (1 and 2 threads) against the reference: only f32 summation order differs,
// so |y - y_ref| <= 1e-5 * sum_c (|w_c| + |m_c|) |x_c| (see `magnitude`).
// Threads split rows, which does not change any row's math: 1 and 2 threads agree bit for bit.
TEST_P(MatmulTypeTest, SimdMatchesReference) {
  const DType type = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(type));
  ThreadPool pool1(1);
  ThreadPool pool2(2);
  int cases = 0;
  for (int64_t rows : {1, 7, 33, 100}) {
    for (int64_t cols : cols_for(type)) {
      const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
      std::vector<float> wf(static_cast<size_t>(rows * cols));
      ASSERT_TRUE(reference::dequantize(type, w.data(), wf.data(), rows * cols).ok());
      for (int64_t tokens : {1, 3, 17, 64}) {
        const std::vector<float> x = random_activations(tokens, cols, rng);
        std::vector<float> y_ref(static_cast<size_t>(tokens * rows));
        ASSERT_TRUE(
            reference::matmul(type, w.data(), rows, cols, x.data(), tokens, y_ref.data()).ok());
        const std::vector<double> scale = magnitude(type, w, rows, cols, wf, x, tokens);
        const WeightMatrix matrix{type, w.data(), rows, cols};
        for (KernelLevel level : simd_levels()) {
          std::vector<float> y1(y_ref.size(), NAN);
          std::vector<float> y2(y_ref.size(), NAN);
          matmul_at_level(level, matrix, x.data(), tokens, y1.data(), pool1);
          matmul_at_level(level, matrix, x.data(), tokens, y2.data(), pool2);
          SCOPED_TRACE(case_name(type, level, rows, cols, tokens, 1));
          int failures = 0;
          for (size_t i = 0; i < y_ref.size() && failures < 5; ++i) {
            const double tolerance = 1e-5 * scale[i] + 1e-30;
            if (!(std::fabs(y1[i] - y_ref[i]) <= tolerance)) {
              ADD_FAILURE() << "index " << i << ": simd " << y1[i] << " reference " << y_ref[i]
                            << " tolerance " << tolerance;
              ++failures;
            }
          }
          EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)))
              << "1 and 2 threads differ";
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// The reference against y = W_f32 x_f32 in double. For the Q8-dot types the only error beyond
// f32 rounding is the activation rounding: x_c = d_b q_c + e_c with |e_c| <= d_b / 2 =
// amax_b / 254 (q = nearest integer to x / d_b), and the reference's split form
// d*da*sum(q a) + m*sa is algebraically sum_c w_c (d_b q_c). So per output
//   |y - y_exact| <= sum_b (amax_b / 254) * sum_{c in b} |w_c|  +  f32 rounding,
// with f32 rounding bounded as in SimdMatchesReference. Other types see only f32 rounding.
TEST_P(MatmulTypeTest, ReferenceMatchesExactProduct) {
  const DType type = GetParam();
  std::mt19937 rng(99 + static_cast<int>(type));
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t cols : cols_for(type)) {
      const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
      std::vector<float> wf(static_cast<size_t>(rows * cols));
      ASSERT_TRUE(reference::dequantize(type, w.data(), wf.data(), rows * cols).ok());
      for (int64_t tokens : {1, 3, 17}) {
        const std::vector<float> x = random_activations(tokens, cols, rng);
        std::vector<float> y(static_cast<size_t>(tokens * rows));
        ASSERT_TRUE(reference::matmul(type, w.data(), rows, cols, x.data(), tokens, y.data()).ok());
        const std::vector<double> scale = magnitude(type, w, rows, cols, wf, x, tokens);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double exact = 0.0;
            double rounding_bound = 0.0;
            for (int64_t c = 0; c < cols; ++c) exact += double(wf[r * cols + c]) * x[t * cols + c];
            if (reference::has_q8_dot(type)) {
              for (int64_t b = 0; b < cols / kQ8Block; ++b) {
                double amax = 0.0;
                double wsum = 0.0;
                for (int64_t c = b * kQ8Block; c < (b + 1) * kQ8Block; ++c) {
                  amax = std::max(amax, double(std::fabs(x[t * cols + c])));
                  wsum += std::fabs(wf[r * cols + c]);
                }
                // Half a step of q, plus the f16 rounding of d (2^-11 relative, times |q| <= 127).
                rounding_bound += (amax / 254.0 + amax / 2048.0) * wsum;
              }
            }
            if (reference::has_q8_k_dot(type)) {
              // Same argument for 256-value blocks; d = amax / 127 stays f32 (no f16 term).
              for (int64_t b = 0; b < cols / kQ8KBlock; ++b) {
                double amax = 0.0;
                double wsum = 0.0;
                for (int64_t c = b * kQ8KBlock; c < (b + 1) * kQ8KBlock; ++c) {
                  amax = std::max(amax, double(std::fabs(x[t * cols + c])));
                  wsum += std::fabs(wf[r * cols + c]);
                }
                rounding_bound += (amax / 254.0) * wsum;
              }
            }
            const size_t i = static_cast<size_t>(t * rows + r);
            const double tolerance = 1.001 * rounding_bound + 1e-5 * scale[i] + 1e-30;
            ASSERT_LE(std::fabs(y[i] - exact), tolerance)
                << case_name(type, KernelLevel::kReference, rows, cols, tokens, 1) << " token " << t
                << " row " << r;
          }
        }
      }
    }
  }
}

// matmul() runs the active level; matmul_at_level(kReference) is the reference.
TEST_P(MatmulTypeTest, DispatchRunsTheActiveLevel) {
  const DType type = GetParam();
  std::mt19937 rng(5);
  const int64_t rows = 40;
  const int64_t cols =
      2 * dtype_info(type).block_elements * (dtype_info(type).block_elements == 1 ? 64 : 1);
  const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
  const std::vector<float> x = random_activations(5, cols, rng);
  ThreadPool pool(2);
  const WeightMatrix matrix{type, w.data(), rows, cols};
  std::vector<float> y(5 * rows), y_level(5 * rows), y_ref(5 * rows), y_ref_level(5 * rows);
  matmul(matrix, x.data(), 5, y.data(), pool);
  matmul_at_level(active_kernel_level(), matrix, x.data(), 5, y_level.data(), pool);
  EXPECT_EQ(0, std::memcmp(y.data(), y_level.data(), y.size() * sizeof(float)));
  matmul_at_level(KernelLevel::kReference, matrix, x.data(), 5, y_ref_level.data(), pool);
  ASSERT_TRUE(reference::matmul(type, w.data(), rows, cols, x.data(), 5, y_ref.data()).ok());
  EXPECT_EQ(0, std::memcmp(y_ref.data(), y_ref_level.data(), y.size() * sizeof(float)));
}

// Batch invariance: a token's outputs are bit-identical whether it is computed alone or with
// others (decode and panel paths, every tile shape), on 1 and 2 threads.
TEST_P(MatmulTypeTest, TokenAloneMatchesTokenInBatch) {
  const DType type = GetParam();
  std::mt19937 rng(77 + static_cast<int>(type));
  ThreadPool pool1(1);
  ThreadPool pool2(2);
  const int64_t rows = 37;
  const int64_t tokens = 9;
  for (int64_t cols : cols_for(type)) {
    const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
    const std::vector<float> x = random_activations(tokens, cols, rng);
    const WeightMatrix matrix{type, w.data(), rows, cols};
    for (KernelLevel level : simd_levels()) {
      for (ThreadPool* pool : {&pool1, &pool2}) {
        SCOPED_TRACE(case_name(type, level, rows, cols, tokens, pool->num_threads()));
        std::vector<float> batch(static_cast<size_t>(tokens * rows), NAN);
        matmul_at_level(level, matrix, x.data(), tokens, batch.data(), *pool);
        for (int64_t t = 0; t < tokens; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows), NAN);
          matmul_at_level(level, matrix, x.data() + t * cols, 1, alone.data(), *pool);
          EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * rows, rows * sizeof(float)))
              << "token " << t;
          // Two tokens take the panel path: the pair (t, t + 1) must agree too.
          if (t + 1 < tokens) {
            std::vector<float> pair(static_cast<size_t>(2 * rows), NAN);
            matmul_at_level(level, matrix, x.data() + t * cols, 2, pair.data(), *pool);
            EXPECT_EQ(0,
                      std::memcmp(pair.data(), batch.data() + t * rows, 2 * rows * sizeof(float)))
                << "tokens " << t << ", " << t + 1;
          }
        }
      }
    }
  }
}

// Q4_0..Q8_0 kernels repeat reference::dot_q8's float operations one by one (exact integer
// block dots, then separately rounded muls and adds in block order), and the K-quant kernels
// reference::dot_q8_k's (exact integer super-block sums, then its muls and adds), so every SIMD
// level equals the reference bit for bit, for every token count (1..65: the decode, direct and
// panel paths, every token-tile remainder, the K-quant tiles' 4-, 2- and 1-token passes, AVX2's
// K-quant lane panels from 8 tokens on) and row count (partial 8-row groups and 16-row
// tiles, odd thread splits), from the file's layout and from weights repacked at load.
class MatmulQ8TypeTest : public testing::TestWithParam<DType> {};

TEST_P(MatmulQ8TypeTest, SimdMatchesReferenceBitForBit) {
  const DType type = GetParam();
  std::mt19937 rng(4242 + static_cast<int>(type));
  ThreadPool pool1(1);
  ThreadPool pool2(2);
  const int64_t max_tokens = 65;
  for (int64_t rows : {1, 7, 8, 9, 16, 24, 31, 37}) {
    const bool k_quant = dtype_info(type).block_elements == 256;
    const std::vector<int64_t> widths =
        k_quant ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576};
    for (int64_t cols : widths) {
      const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
      const std::vector<float> x = random_activations(max_tokens, cols, rng);
      std::vector<float> y_ref(static_cast<size_t>(max_tokens * rows));
      ASSERT_TRUE(
          reference::matmul(type, w.data(), rows, cols, x.data(), max_tokens, y_ref.data()).ok());
      // The file's layout, and the repacked one.
      std::vector<WeightMatrix> layouts{WeightMatrix{type, w.data(), rows, cols}};
      HugePageArena arena;
      if (RepackedWeights::supports(layouts[0])) {
        layouts.push_back(repacked_copy(layouts[0], arena));
      }
      for (const WeightMatrix& matrix : layouts) {
        for (KernelLevel level : simd_levels()) {
          for (int64_t tokens = 1; tokens <= max_tokens; ++tokens) {
            for (ThreadPool* pool : {&pool1, &pool2}) {
              std::vector<float> y(static_cast<size_t>(tokens * rows), NAN);
              matmul_at_level(level, matrix, x.data(), tokens, y.data(), *pool);
              ASSERT_EQ(0, std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float)))
                  << case_name(type, level, rows, cols, tokens, pool->num_threads())
                  << (matrix.packed ? " (repacked)" : "");
            }
          }
        }
      }
    }
  }
}

// The repacked matrix gives exactly the file layout's outputs at every SIMD level, for each token
// count (x holds at least the largest) and each pool.
void expect_repacked_matches_file(const WeightMatrix& file, const WeightMatrix& repacked,
                                  const std::vector<float>& x,
                                  const std::vector<int64_t>& token_counts,
                                  std::initializer_list<ThreadPool*> pools) {
  for (KernelLevel level : simd_levels()) {
    for (int64_t tokens : token_counts) {
      for (ThreadPool* pool : pools) {
        std::vector<float> expected(static_cast<size_t>(tokens * file.rows), NAN);
        std::vector<float> y(expected.size(), NAN);
        matmul_at_level(level, file, x.data(), tokens, expected.data(), *pool);
        matmul_at_level(level, repacked, x.data(), tokens, y.data(), *pool);
        ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
            << case_name(file.type, level, file.rows, file.cols, tokens, pool->num_threads());
      }
    }
  }
}

// K-quant weights repacked at load (16-row tiles) give exactly what the file's layout gives, at
// every level: the kernels read the tiles (1, 2 or 4 tokens at a time; AVX2 as two 8-row
// halves, and from 8 tokens through lane panels of each half); last partial tiles, odd
// thread splits and 1-19, 64 and 67 tokens included. The repacking itself round-trips.
TEST(MatmulTest, RepackedKQuantsMatchFileLayoutBitForBit) {
  std::mt19937 rng(4096);
  ThreadPool pool1(1);
  ThreadPool pool2(2);
  // 1-19 tokens, and past Q5_K's switch from tiles to panels (64 tokens).
  std::vector<int64_t> token_counts;
  for (int64_t tokens = 1; tokens <= 19; ++tokens) token_counts.push_back(tokens);
  token_counts.insert(token_counts.end(), {64, 67});
  const int64_t max_tokens = token_counts.back();
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t rows : {1, 7, 16, 17, 40}) {
      for (int64_t cols : {256, 768}) {
        const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
        const std::vector<float> x = random_activations(max_tokens, cols, rng);
        const WeightMatrix file{type, w.data(), rows, cols};
        ASSERT_TRUE(RepackedWeights::supports(file));
        HugePageArena arena;
        const WeightMatrix repacked = repacked_copy(file, arena);
        const uint8_t* packed = repacked.packed;
        const int64_t row_bytes = static_cast<int64_t>(file.row_bytes());
        const int64_t tile_bytes = cols / 256 * repacked_block_bytes(type);
        for (int64_t r0 = 0; r0 < rows; r0 += 16) {
          const int num_rows = static_cast<int>(std::min<int64_t>(16, rows - r0));
          std::vector<uint8_t> back(static_cast<size_t>(num_rows * row_bytes));
          RepackedWeights::unpack_k_tile(type, packed + r0 / 16 * tile_bytes, cols, num_rows,
                                         back.data(), row_bytes);
          ASSERT_EQ(0, std::memcmp(back.data(), w.data() + r0 * row_bytes, back.size()))
              << dtype_name(type) << " rows " << rows << " cols " << cols << " tile at " << r0;
        }
        ASSERT_NO_FATAL_FAILURE(
            expect_repacked_matches_file(file, repacked, x, token_counts, {&pool1, &pool2}));
      }
    }
  }
}

// F16/BF16 weights repacked at load (16-value pieces of 8-row tiles) give exactly what the
// file's layout gives: decode tiles (1 and 2 tokens), the prefill panel widened from tiles, and
// partial last tiles and odd thread splits.
TEST(MatmulTest, RepackedSixteenBitFloatsMatchFileLayoutBitForBit) {
  std::mt19937 rng(1616);
  ThreadPool pool1(1);
  ThreadPool pool2(2);
  const int64_t max_tokens = 19;
  std::vector<int64_t> token_counts;
  for (int64_t tokens = 1; tokens <= max_tokens; ++tokens) token_counts.push_back(tokens);
  for (DType type : {DType::kF16, DType::kBF16}) {
    for (int64_t rows : {1, 7, 8, 9, 31, 37}) {
      for (int64_t cols : {32, 96, 576}) {
        const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
        const std::vector<float> x = random_activations(max_tokens, cols, rng);
        const WeightMatrix file{type, w.data(), rows, cols};
        ASSERT_TRUE(RepackedWeights::supports(file));
        HugePageArena arena;
        const WeightMatrix repacked = repacked_copy(file, arena);
        ASSERT_NO_FATAL_FAILURE(
            expect_repacked_matches_file(file, repacked, x, token_counts, {&pool1, &pool2}));
      }
    }
  }
}

// f32 prompt products sweep tokens in blocks that keep their activations in L2 (a few dozen
// tokens of rows this wide): every token of a batch spanning several blocks, partial last
// block and odd thread splits included, gets what it gets alone, bit for bit.
TEST(MatmulTest, FloatPromptTokenBlocksMatchTokensAlone) {
  std::mt19937 rng(4128);
  ThreadPool pool(2);
  const int64_t rows = 21;
  const int64_t cols = 4128;  // 16.5 KiB of f32 per token: blocks of ~28 tokens
  const int64_t tokens = 70;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
    const std::vector<float> x = random_activations(tokens, cols, rng);
    HugePageArena arena;
    const WeightMatrix file{type, w.data(), rows, cols};
    const WeightMatrix repacked =
        RepackedWeights::supports(file) ? repacked_copy(file, arena) : file;
    for (const WeightMatrix& matrix : {file, repacked}) {
      for (KernelLevel level : simd_levels()) {
        std::vector<float> batch(static_cast<size_t>(tokens * rows), NAN);
        matmul_at_level(level, matrix, x.data(), tokens, batch.data(), pool);
        for (int64_t t = 0; t < tokens; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows), NAN);
          matmul_at_level(level, matrix, x.data() + t * cols, 1, alone.data(), pool);
          ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * rows, rows * sizeof(float)))
              << dtype_name(type) << " level " << kernel_level_name(level) << " token " << t;
        }
      }
    }
  }
}

// Batch invariance for every type and token count 1..65: the first `tokens` tokens of a
// 65-token batch give bit-identical outputs when computed on their own, and each token alone
// matches its row in the batch.
TEST_P(MatmulTypeTest, BatchPrefixesMatchFullBatch) {
  const DType type = GetParam();
  std::mt19937 rng(31 + static_cast<int>(type));
  ThreadPool pool(2);
  const int64_t max_tokens = 65;
  const int64_t rows = 19;
  const int64_t cols = cols_for(type).back();
  const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
  const std::vector<float> x = random_activations(max_tokens, cols, rng);
  const WeightMatrix matrix{type, w.data(), rows, cols};
  for (KernelLevel level : simd_levels()) {
    std::vector<float> batch(static_cast<size_t>(max_tokens * rows), NAN);
    matmul_at_level(level, matrix, x.data(), max_tokens, batch.data(), pool);
    for (int64_t tokens = 1; tokens < max_tokens; ++tokens) {
      std::vector<float> y(static_cast<size_t>(tokens * rows), NAN);
      matmul_at_level(level, matrix, x.data(), tokens, y.data(), pool);
      ASSERT_EQ(0, std::memcmp(y.data(), batch.data(), y.size() * sizeof(float)))
          << case_name(type, level, rows, cols, tokens, 2);
    }
    for (int64_t t = 0; t < max_tokens; ++t) {
      std::vector<float> alone(static_cast<size_t>(rows), NAN);
      matmul_at_level(level, matrix, x.data() + t * cols, 1, alone.data(), pool);
      ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * rows, rows * sizeof(float)))
          << case_name(type, level, rows, cols, 1, 2) << " token " << t;
    }
  }
}

// SIMD 256-block activation quantization is bit-identical to the reference (q, d and bsums).
TEST(MatmulTest, QuantizeActivationsKMatchesReferenceExactly) {
  std::mt19937 rng(8);
  for (int64_t cols : {256, 512, 2304}) {
    const int64_t tokens = 5;
    std::vector<float> x = random_activations(tokens, cols, rng);
    x[3] = 1e-35f;
    x[cols + 5] = 2.5f * (1.0f / 127);
    const int64_t blocks = tokens * cols / kQ8KBlock;
    const int64_t groups = tokens * cols / reference::kQ8KSumGroup;
    std::vector<int8_t> qs_ref(tokens * cols), qs(tokens * cols);
    std::vector<float> d_ref(blocks), d(blocks);
    std::vector<int16_t> sums_ref(groups), sums(groups);
    reference::quantize_activations_q8_k(x.data(), tokens, cols, qs_ref.data(), d_ref.data(),
                                         sums_ref.data());
    for (KernelLevel level : simd_levels()) {
      SCOPED_TRACE(std::string(kernel_level_name(level)) + " cols=" + std::to_string(cols));
      if (level == KernelLevel::kAvx2) {
        avx2::quantize_activations_k(x.data(), tokens, cols, qs.data(), d.data(), sums.data());
      } else {
        avx512::quantize_activations_k(x.data(), tokens, cols, qs.data(), d.data(), sums.data());
      }
      EXPECT_EQ(qs, qs_ref);
      EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
      EXPECT_EQ(sums, sums_ref);
    }
  }
}

TEST(MatmulTest, ReferenceQuantizationKKeepsF32ScaleAndSums) {
  std::vector<float> x(256, 0.0f);
  x[0] = 3.0f;  // amax: d = 3 / 127 in f32 (an f16 would round it)
  x[1] = -1.5f;
  x[17] = 1.0f;
  x[255] = -3.0f;
  std::vector<int8_t> qs(256);
  float d = 0.0f;
  std::vector<int16_t> sums(16);
  reference::quantize_row_q8_k(x.data(), 256, qs.data(), &d, sums.data());
  EXPECT_EQ(d, 3.0f / 127.0f);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], -64);  // -63.5 rounds half to even
  EXPECT_EQ(qs[17], 42);  // 42.33
  EXPECT_EQ(qs[255], -127);
  EXPECT_EQ(sums[0], 127 - 64);
  EXPECT_EQ(sums[1], 42);
  EXPECT_EQ(sums[15], -127);
  for (int g = 2; g < 15; ++g) EXPECT_EQ(sums[g], 0) << g;
}

// Repeated calls with growing and shrinking shapes reuse the scratch buffers correctly.
// matmul_many (one quantization per activation format, one pass over the pool) gives each
// product exactly what its own matmul gives, whatever mix of formats it gets.
TEST(MatmulTest, ManyProductsMatchSeparateProducts) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  const int64_t cols = 512;  // a multiple of the K-quants' 256
  const DType types[] = {DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kF16, DType::kQ6_K};
  const int64_t rows[] = {40, 8, 33, 17, 64};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> matrices;
  for (size_t i = 0; i < std::size(types); ++i) {
    storage.push_back(random_weights(types[i], rows[i], cols, rng));
    matrices.push_back(WeightMatrix{types[i], storage.back().data(), rows[i], cols});
  }
  HugePageArena arena;
  matrices[0] = repacked_copy(matrices[0], arena);
  for (KernelLevel level : simd_levels()) {
    for (int64_t tokens : {1, 2, 7, 40}) {
      const std::vector<float> x = random_activations(tokens, cols, rng);
      std::vector<std::vector<float>> together(matrices.size());
      std::vector<MatmulProduct> products;
      for (size_t i = 0; i < matrices.size(); ++i) {
        together[i].assign(static_cast<size_t>(tokens * matrices[i].rows), NAN);
        products.push_back({&matrices[i], together[i].data()});
      }
      matmul_many_at_level(level, products, x.data(), tokens, pool);
      for (size_t i = 0; i < matrices.size(); ++i) {
        std::vector<float> alone(together[i].size(), NAN);
        matmul_at_level(level, matrices[i], x.data(), tokens, alone.data(), pool);
        EXPECT_EQ(0, std::memcmp(alone.data(), together[i].data(), alone.size() * sizeof(float)))
            << dtype_name(types[i]) << " level " << kernel_level_name(level) << " tokens "
            << tokens;
      }
    }
  }
}

// An input quantized row by row as its rows are written (in any order, from several threads)
// gives every product the same bits as matmul_many quantizing x itself, at every level; and it
// serves only the formats and width it was prepared for.
TEST(MatmulInputTest, RowByRowQuantizationGivesTheSameProducts) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const int64_t cols = 768;  // three 256-value blocks
  const DType types[] = {DType::kQ4_0, DType::kQ5_K, DType::kBF16, DType::kQ8_0};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> matrices;
  for (DType type : types) {
    storage.push_back(random_weights(type, 24, cols, rng));
    matrices.push_back(WeightMatrix{type, storage.back().data(), 24, cols});
  }
  std::vector<KernelLevel> levels = simd_levels();
  levels.push_back(KernelLevel::kReference);
  MatmulInput input;  // reused across shapes, as a model's workspace reuses it
  for (KernelLevel level : levels) {
    for (int64_t tokens : {1, 5, 33}) {
      const std::vector<float> x = random_activations(tokens, cols, rng);
      std::vector<float> rows(x.size(), NAN);  // written row by row, last row first
      std::vector<MatmulProduct> products;
      std::vector<std::vector<float>> prepared(matrices.size());
      for (size_t i = 0; i < matrices.size(); ++i) {
        prepared[i].assign(static_cast<size_t>(tokens * 24), NAN);
        products.push_back({&matrices[i], prepared[i].data()});
      }
      input.prepare(level, products, rows.data(), tokens);
      pool.run([&](int thread, int threads) {
        for (int64_t t = tokens - 1 - thread; t >= 0; t -= threads) {
          std::memcpy(rows.data() + t * cols, x.data() + t * cols, cols * sizeof(float));
          input.quantize_rows(t, t + 1);
        }
      });
      matmul_many(products, input, pool);
      for (size_t i = 0; i < matrices.size(); ++i) {
        std::vector<float> direct(prepared[i].size(), NAN);
        matmul_at_level(level, matrices[i], x.data(), tokens, direct.data(), pool);
        EXPECT_EQ(0, std::memcmp(direct.data(), prepared[i].data(), direct.size() * sizeof(float)))
            << dtype_name(types[i]) << " level " << kernel_level_name(level) << " tokens "
            << tokens;
      }
    }
  }
  // Prepared for Q4_0 alone: serves other 32-block and f32 weights of that width, not K-quants
  // (their 256-value blocks were never quantized) and not another width.
  if (simd_levels().empty()) return;  // the reference level's oracle quantizes for itself
  const MatmulProduct q4_0[] = {{&matrices[0], nullptr}};
  input.prepare(simd_levels().back(), q4_0, nullptr, 0);
  EXPECT_TRUE(input.serves(matrices[0]));
  EXPECT_TRUE(input.serves(matrices[3]));
  EXPECT_TRUE(input.serves(matrices[2]));
  EXPECT_FALSE(input.serves(matrices[1]));
  const WeightMatrix narrower{DType::kQ4_0, storage[0].data(), 24, 256};
  EXPECT_FALSE(input.serves(narrower));
}

// Tensor parallelism: an input assembled from column blocks that were quantized apart (as TP
// ranks quantize their own columns) gives the same products as quantizing whole rows, for the
// 32-value and the 256-value formats, at every SIMD level; a product that reads f32 rows (or
// the reference level's oracle) cannot be assembled so.
TEST(MatmulInputTest, ColumnBlocksQuantizedApartGiveTheSameProducts) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const int64_t cols = 1024;
  for (DType type : {DType::kQ4_1, DType::kQ6_K}) {
    std::vector<uint8_t> storage = random_weights(type, 32, cols, rng);
    const WeightMatrix weight{type, storage.data(), 32, cols};
    const int64_t unit = type == DType::kQ6_K ? 256 : 32;
    // Uneven blocks, each a whole number of the format's blocks, placed in no particular order.
    const std::vector<int64_t> firsts = {0, unit, 3 * unit};
    for (KernelLevel level : simd_levels()) {
      for (int64_t tokens : {1, 40}) {
        const std::vector<float> x = random_activations(tokens, cols, rng);
        std::vector<float> whole(static_cast<size_t>(tokens * 32), NAN);
        matmul_at_level(level, weight, x.data(), tokens, whole.data(), pool);

        std::vector<float> assembled(whole.size(), NAN);
        const MatmulProduct product[] = {{&weight, assembled.data()}};
        MatmulInput input;
        input.prepare(level, product, nullptr, tokens);
        ASSERT_EQ(input.column_unit(), unit) << dtype_name(type);
        for (size_t b = firsts.size(); b-- > 0;) {
          const int64_t first = firsts[b];
          const int64_t width = (b + 1 < firsts.size() ? firsts[b + 1] : cols) - first;
          std::vector<float> columns(static_cast<size_t>(tokens * width));
          for (int64_t t = 0; t < tokens; ++t) {
            std::memcpy(columns.data() + t * width, x.data() + t * cols + first,
                        static_cast<size_t>(width) * sizeof(float));
          }
          std::vector<std::byte> block(static_cast<size_t>(input.block_bytes(width)));
          input.quantize_block(columns.data(), width, block.data(), pool);
          input.place_block(block.data(), width, first);
        }
        matmul_many(product, input, pool);
        EXPECT_EQ(0, std::memcmp(whole.data(), assembled.data(), whole.size() * sizeof(float)))
            << dtype_name(type) << " level " << kernel_level_name(level) << " tokens " << tokens;
      }
    }
    MatmulInput oracle;
    const MatmulProduct product[] = {{&weight, nullptr}};
    oracle.prepare(KernelLevel::kReference, product, nullptr, 1);
    EXPECT_EQ(oracle.column_unit(), 0);
  }
  if (simd_levels().empty()) return;
  std::vector<uint8_t> storage = random_weights(DType::kBF16, 16, cols, rng);
  const WeightMatrix bf16{DType::kBF16, storage.data(), 16, cols};
  const MatmulProduct product[] = {{&bf16, nullptr}};
  MatmulInput input;
  input.prepare(simd_levels().back(), product, nullptr, 1);
  EXPECT_EQ(input.column_unit(), 0);
}

// The epilogue sees each thread's finished rows once: disjoint ranges starting at multiples of
// 16 that cover every row, the products' values already final there (at every level,
// including the reference, which calls it once for all rows).
TEST(MatmulTest, EpilogueRunsOnEachThreadsFinishedRows) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  const int64_t cols = 256;
  const int64_t rows = 72;  // not a multiple of 16
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> matrices;
  for (DType type : {DType::kQ4_0, DType::kQ4_K}) {
    storage.push_back(random_weights(type, rows, cols, rng));
    matrices.push_back(WeightMatrix{type, storage.back().data(), rows, cols});
  }
  std::vector<KernelLevel> levels = simd_levels();
  levels.push_back(KernelLevel::kReference);
  for (KernelLevel level : levels) {
    for (int64_t tokens : {1, 3, 40}) {
      const std::vector<float> x = random_activations(tokens, cols, rng);
      std::vector<float> first(static_cast<size_t>(tokens * rows), NAN);
      std::vector<float> second(first.size(), NAN);
      const MatmulProduct products[] = {{&matrices[0], first.data()},
                                        {&matrices[1], second.data()}};
      // What each row held when the epilogue saw it (both products), and how often it was seen.
      std::vector<float> seen(2 * first.size(), NAN);
      std::vector<int> calls(rows, 0);
      std::mutex mutex;
      auto record = [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_EQ(begin % 16, 0);
        EXPECT_LT(begin, end);
        for (int64_t r = begin; r < end; ++r) {
          ++calls[r];
          for (int64_t t = 0; t < tokens; ++t) {
            seen[t * rows + r] = first[t * rows + r];
            seen[first.size() + t * rows + r] = second[t * rows + r];
          }
        }
      };
      const RowEpilogue epilogue(record);
      matmul_many_at_level(level, products, x.data(), tokens, pool, &epilogue);
      EXPECT_EQ(calls, std::vector<int>(rows, 1)) << kernel_level_name(level);
      std::vector<float> final_values = first;
      final_values.insert(final_values.end(), second.begin(), second.end());
      EXPECT_EQ(0, std::memcmp(seen.data(), final_values.data(), seen.size() * sizeof(float)))
          << kernel_level_name(level) << " tokens " << tokens;
    }
  }
}

TEST(MatmulTest, RepeatedCallsWithChangingShapes) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (int64_t cols : {64, 1536, 32, 576}) {
    for (int64_t tokens : {40, 1, 9}) {
      const int64_t rows = 50;
      const std::vector<uint8_t> w = random_weights(DType::kQ4_1, rows, cols, rng);
      const std::vector<float> x = random_activations(tokens, cols, rng);
      std::vector<float> y(tokens * rows), y_ref(tokens * rows);
      matmul({DType::kQ4_1, w.data(), rows, cols}, x.data(), tokens, y.data(), pool);
      ASSERT_TRUE(
          reference::matmul(DType::kQ4_1, w.data(), rows, cols, x.data(), tokens, y_ref.data())
              .ok());
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], y_ref[i], 1e-4f * (1.0f + std::fabs(y_ref[i]))) << i;
      }
    }
  }
}

// The prefetch distance: 0 (Zen 4 tuning) off Intel; on Intel the long one for a working set
// that fits in the caches and the short one for one streamed from memory (when the L3 size is
// known); TACHYON_DECODE_PREFETCH wins for every working set (the decode_prefetch_* runs).
TEST(MatmulTest, DecodePrefetchDistanceFollowsTheWorkingSet) {
  const int64_t cached = decode_prefetch_bytes(0);
  const int64_t streamed = decode_prefetch_bytes(int64_t{1} << 50);
  const char* requested = std::getenv("TACHYON_DECODE_PREFETCH");
  if (requested != nullptr && *requested != '\0') {
    EXPECT_EQ(cached, std::atoll(requested));
    EXPECT_EQ(streamed, cached);
  } else if (!CpuFeatures::get().intel) {
    // AMD: none for the AVX-512 kernels, kDecodePrefetchBytes for the AVX2 ones.
    const int64_t amd = active_kernel_level() == KernelLevel::kAvx2 ? kDecodePrefetchBytes : 0;
    EXPECT_EQ(cached, amd);
    EXPECT_EQ(streamed, amd);
  } else {
    EXPECT_EQ(cached, kDecodePrefetchBytes);
    EXPECT_EQ(streamed, sysconf(_SC_LEVEL3_CACHE_SIZE) > 0 ? kDecodePrefetchFromMemoryBytes
                                                           : kDecodePrefetchBytes);
  }
  // A matrix on its own (decode_prefetch -1) gets the cached working set's distance.
  EXPECT_EQ(decode_prefetch_of(WeightMatrix{}), cached);
  EXPECT_EQ(decode_prefetch_of(WeightMatrix{.decode_prefetch = 4096}), 4096);
}

// How far ahead a matrix's weights are prefetched changes no result: every repacked type's
// decode tiles (1 and 2 tokens), bit for bit, at every level.
TEST(MatmulTest, DecodePrefetchDistanceChangesNoResult) {
  std::mt19937 rng(2048);
  ThreadPool pool(2);
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kF16, DType::kBF16, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t rows = 40;
    const int64_t cols = 512;
    const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
    const std::vector<float> x = random_activations(2, cols, rng);
    HugePageArena arena;
    WeightMatrix matrix = repacked_copy(WeightMatrix{type, w.data(), rows, cols}, arena);
    for (KernelLevel level : simd_levels()) {
      for (int64_t tokens : {1, 2}) {
        std::vector<float> first;
        for (int64_t ahead : {0, 64, 2048, 12288, 1 << 20}) {
          matrix.decode_prefetch = ahead;
          std::vector<float> y(static_cast<size_t>(tokens * rows));
          matmul_at_level(level, matrix, x.data(), tokens, y.data(), pool);
          if (first.empty()) first = y;
          ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
              << dtype_name(type) << " " << kernel_level_name(level) << " tokens " << tokens
              << " ahead " << ahead;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Q8DotTypes, MatmulQ8TypeTest,
                         testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                         DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypeTest, testing::ValuesIn(kAllTypes),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace tachyon::kernels
