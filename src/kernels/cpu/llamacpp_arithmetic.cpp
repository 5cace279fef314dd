#include "kernels/cpu/llamacpp_arithmetic.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "kernels/cpu/kernel_level.h"
#include "kernels/reference/quantize_activations.h"

// Built with -ffp-contract=off: every fused multiply-add below is written out (std::fma), the
// rest is rounded step by step, as llama.cpp's build computes it. The loops get a copy per
// kernel level (TACHYON_DISPATCH_BY_LEVEL): from AVX2 on, std::fma is one instruction instead
// of a libm call; the results are the same bits.

namespace tachyon::kernels::llamacpp {
namespace {

constexpr int kBlock = 32;  // Q4_1, Q8_0 and Q8_1 block size
constexpr int kLanes = 8;   // ggml's 256-bit float accumulator

// ggml's hsum_float_8: the upper four lanes onto the lower four, then pairs.
float sum_8_lanes(const float* lanes) {
  const float t0 = lanes[0] + lanes[4], t1 = lanes[1] + lanes[5];
  const float t2 = lanes[2] + lanes[6], t3 = lanes[3] + lanes[7];
  return (t0 + t2) + (t1 + t3);
}

// A Q4_1 block: f16 scale d, f16 minimum m, 32 nibbles (element i < 16 in the low nibble of
// byte i, element 16 + i in its high nibble). Value = d * q + m.
float dot_q4_1(const uint8_t* row, const int8_t* qs, const float* d, const float* s,
               int64_t blocks) {
  float lanes[kLanes] = {};
  float offsets = 0.0f;  // sum over blocks of m * s (s = the activation block's d * sum(q))
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * 20;
    uint16_t d_bits, m_bits;
    std::memcpy(&d_bits, block, 2);
    std::memcpy(&m_bits, block + 2, 2);
    const uint8_t* nibbles = block + 4;
    const int8_t* a = qs + b * kBlock;
    // The compiler fused this multiply-add in llama.cpp's build.
    offsets = std::fma(f16_to_f32(m_bits), s[b], offsets);
    const float scale = f16_to_f32(d_bits) * d[b];
    for (int lane = 0; lane < kLanes; ++lane) {
      int sum = 0;
      for (int i = 4 * lane; i < 4 * lane + 4; ++i) {
        const int q = i < 16 ? nibbles[i] & 0x0f : nibbles[i - 16] >> 4;
        sum += q * a[i];
      }
      lanes[lane] = std::fma(scale, static_cast<float>(sum), lanes[lane]);
    }
  }
  return sum_8_lanes(lanes) + offsets;
}

// A Q8_0 block: f16 scale d, 32 int8 values.
float dot_q8_0(const uint8_t* row, const int8_t* qs, const float* d, int64_t blocks) {
  float lanes[kLanes] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * 34;
    uint16_t d_bits;
    std::memcpy(&d_bits, block, 2);
    const int8_t* w = reinterpret_cast<const int8_t*>(block + 2);
    const int8_t* a = qs + b * kBlock;
    const float scale = f16_to_f32(d_bits) * d[b];
    for (int lane = 0; lane < kLanes; ++lane) {
      int sum = 0;
      for (int i = 4 * lane; i < 4 * lane + 4; ++i) sum += w[i] * a[i];
      lanes[lane] = std::fma(scale, static_cast<float>(sum), lanes[lane]);
    }
  }
  return sum_8_lanes(lanes);
}

// The same two products with AVX2: maddubs + madd give each 32-bit lane the exact integer sum
// of its 4 bytes (no 16-bit saturation: |products| <= 2 * 128 * 127), then the lane's fma.
__attribute__((target("avx2,fma"))) float dot_q4_1_avx2(const uint8_t* row, const int8_t* qs,
                                                        const float* d, const float* s,
                                                        int64_t blocks) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 lanes = _mm256_setzero_ps();
  float offsets = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * 20;
    uint16_t d_bits, m_bits;
    std::memcpy(&d_bits, block, 2);
    std::memcpy(&m_bits, block + 2, 2);
    offsets = std::fma(f16_to_f32(m_bits), s[b], offsets);
    const float scale = f16_to_f32(d_bits) * d[b];
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
    const __m256i q =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low_nibbles);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + b * kBlock));
    const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), ones);
    lanes = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), lanes);
  }
  alignas(32) float stored[kLanes];
  _mm256_store_ps(stored, lanes);
  return sum_8_lanes(stored) + offsets;
}

__attribute__((target("avx2,fma"))) float dot_q8_0_avx2(const uint8_t* row, const int8_t* qs,
                                                        const float* d, int64_t blocks) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 lanes = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * 34;
    uint16_t d_bits;
    std::memcpy(&d_bits, block, 2);
    const float scale = f16_to_f32(d_bits) * d[b];
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + b * kBlock));
    // |w| times a with w's sign: unsigned x signed bytes, as maddubs needs.
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    const __m256i sums = _mm256_madd_epi16(products, ones);
    lanes = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), lanes);
  }
  alignas(32) float stored[kLanes];
  _mm256_store_ps(stored, lanes);
  return sum_8_lanes(stored);
}

// ggml's vectorised exp (AVX-512 flavour), one lane: 2^n * p(b) with n = round(x / ln 2) and
// b = x - n ln 2 (ln 2 in two parts), p a degree-5 polynomial; |n| > 192 gives 0 or infinity.
float vector_exp(float x) {
  const float shifter = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shifter);
  const float n = z - shifter;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  if (std::isnan(n)) return n;  // NaN in, NaN out (as vscalefps gives)
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  const float u = b * b;
  const float high = std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f));
  const float j = std::fma(high, u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  // vscalefps: j * 2^n rounded once. A normal power of two does that in one multiply.
  const int exponent = static_cast<int>(n);
  if (exponent >= -126 && exponent <= 127) {
    return j * std::bit_cast<float>(static_cast<uint32_t>(exponent + 127) << 23);
  }
  return std::ldexp(j, exponent);
}

// _mm512_reduce_add_ps as GCC builds it: upper 8 lanes onto the lower 8, then 4, then pairs.
float sum_16_lanes(const float* lanes) {
  float eight[8], four[4];
  for (int l = 0; l < 8; ++l) eight[l] = lanes[l + 8] + lanes[l];
  for (int l = 0; l < 4; ++l) four[l] = eight[l + 4] + eight[l];
  return (four[0] + four[2]) + (four[1] + four[3]);
}

// ggml_vec_dot_f16 for one query (f16 values) and one key: 4 accumulators of 16 lanes over
// each 64 elements, folded pairwise, then _mm512_reduce_add_ps's tree; a tail in double.
float dot_f16(const float* x, const float* y, int n) {
  constexpr int kStep = 64;
  constexpr int kWidth = 16;
  float sums[4][kWidth] = {};
  const int whole = n - n % kStep;
  for (int i = 0; i < whole; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < kWidth; ++l) {
        sums[j][l] = std::fma(x[i + j * kWidth + l], y[i + j * kWidth + l], sums[j][l]);
      }
    }
  }
  float folded[kWidth];
  for (int l = 0; l < kWidth; ++l)
    folded[l] = (sums[0][l] + sums[2][l]) + (sums[1][l] + sums[3][l]);
  double total = sum_16_lanes(folded);
  for (int i = whole; i < n; ++i) total += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(total);
}

// What one pass over a range of positions leaves: the running maximum and sum of the online
// softmax, the unnormalised output in `accumulator`.
struct AttentionPartial {
  float max = -INFINITY;
  float sum = 0.0f;
};

// ggml's one-chunk flash attention for positions [begin, end): the query rounded to f16, f16
// dot products, glibc's expf, the output accumulated in f16 (rounded after each position).
// accumulator: f32 [head_size], written (f16 values).
__attribute__((always_inline)) inline AttentionPartial attention_chunk_body(
    const float* query, const float* keys, const float* values, int begin, int end, int head_size,
    float scale, float* accumulator) {
  thread_local std::vector<float> query_f16;
  query_f16.resize(head_size);
  for (int d = 0; d < head_size; ++d) query_f16[d] = round_to_f16(query[d]);
  std::fill(accumulator, accumulator + head_size, 0.0f);
  AttentionPartial state;
  for (int p = begin; p < end; ++p) {
    const float score =
        dot_f16(keys + static_cast<int64_t>(p) * head_size, query_f16.data(), head_size) * scale;
    float rescale = 1.0f;  // for the accumulator and sum, when the maximum grows
    float weight = 1.0f;   // exp(score - max)
    if (score > state.max) {
      const float previous = state.max;
      state.max = score;
      rescale = std::exp(previous - state.max);
      for (int d = 0; d < head_size; ++d) accumulator[d] = round_to_f16(accumulator[d] * rescale);
    } else {
      weight = std::exp(score - state.max);
    }
    const float* value = values + static_cast<int64_t>(p) * head_size;
    for (int d = 0; d < head_size; ++d) {
      accumulator[d] = round_to_f16(std::fma(value[d], weight, accumulator[d]));
    }
    state.sum = std::fma(state.sum, rescale, weight);
  }
  return state;
}

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kAttention, AttentionPartial, attention_chunk,
                          (const float* query, const float* keys, const float* values, int begin,
                           int end, int head_size, float scale, float* accumulator),
                          (query, keys, values, begin, end, head_size, scale, accumulator))

}  // namespace

bool matmul_supports(DType type) {
  return type == DType::kQ4_1 || type == DType::kQ8_0;
}

void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool) {
  llamacpp::matmul_at_level(active_kernel_level(), w, x, num_tokens, y, pool);
}

void matmul_at_level(KernelLevel level, const WeightMatrix& w, const float* x, int64_t num_tokens,
                     float* y, ThreadPool& pool) {
  TACHYON_CHECK(matmul_supports(w.type) && w.cols % kBlock == 0);
  const int64_t blocks = w.cols / kBlock;
  thread_local std::vector<int8_t> qs_storage;
  thread_local std::vector<float> d_storage, s_storage;
  std::vector<int8_t>& qs = qs_storage;
  std::vector<float>& d = d_storage;
  std::vector<float>& s = s_storage;
  qs.resize(num_tokens * w.cols);
  d.resize(num_tokens * blocks);
  s.resize(num_tokens * blocks);
  reference::quantize_activations_q8(x, num_tokens, w.cols, qs.data(), d.data(), s.data());
  const size_t row_bytes = w.row_bytes();
  const bool avx2 = level != KernelLevel::kReference && CpuFeatures::get().has_avx2_kernels();
  pool.run([&](int thread_index, int num_threads) {
    const int64_t per_thread = (w.rows + num_threads - 1) / num_threads;
    const int64_t first = per_thread * thread_index;
    const int64_t last = std::min(w.rows, first + per_thread);
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int8_t* token_qs = qs.data() + t * w.cols;
      const float* token_d = d.data() + t * blocks;
      const float* token_s = s.data() + t * blocks;
      for (int64_t r = first; r < last; ++r) {
        const uint8_t* row = w.data + r * row_bytes;
        float& out = y[t * w.rows + r];
        if (w.type == DType::kQ4_1) {
          out = avx2 ? dot_q4_1_avx2(row, token_qs, token_d, token_s, blocks)
                     : dot_q4_1(row, token_qs, token_d, token_s, blocks);
        } else {
          out = avx2 ? dot_q8_0_avx2(row, token_qs, token_d, blocks)
                     : dot_q8_0(row, token_qs, token_d, blocks);
        }
      }
    }
  });
}

__attribute__((always_inline)) inline void rms_norm_body(const float* x, const float* weight,
                                                         int size, float eps, float* out) {
  double sum_squares = 0.0;
  for (int i = 0; i < size; ++i) sum_squares += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum_squares / size);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < size; ++i) out[i] = x[i] * scale * weight[i];
}

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, rms_norm,
                          (const float* x, const float* weight, int size, float eps, float* out),
                          (x, weight, size, eps, out))

__attribute__((always_inline)) inline void swiglu_body(const float* gate, const float* up,
                                                       int64_t size, float* out) {
  // ggml's SIMD loop covers whole vectors of 16; the rest goes through libm's expf.
  const int64_t vectorised = size - size % 16;
  for (int64_t i = 0; i < size; ++i) {
    const float g = gate[i];
    const float e = i < vectorised ? vector_exp(0.0f - g) : std::exp(-g);
    out[i] = g / (1.0f + e) * up[i];
  }
}

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, swiglu,
                          (const float* gate, const float* up, int64_t size, float* out),
                          (gate, up, size, out))

__attribute__((always_inline)) inline void rope_rotate_body(float* heads, int num_heads,
                                                            int head_size, const float* cos,
                                                            const float* sin, bool adjacent_pairs) {
  const int pairs = head_size / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* head = heads + static_cast<int64_t>(h) * head_size;
    for (int j = 0; j < pairs; ++j) {
      float& first = adjacent_pairs ? head[2 * j] : head[j];
      float& second = adjacent_pairs ? head[2 * j + 1] : head[j + pairs];
      const float x0 = first, x1 = second;
      first = std::fma(x0, cos[j], -(x1 * sin[j]));
      second = std::fma(x0, sin[j], x1 * cos[j]);
    }
  }
}

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kRope, void, rope_rotate,
                          (float* heads, int num_heads, int head_size, const float* cos,
                           const float* sin, bool adjacent_pairs),
                          (heads, num_heads, head_size, cos, sin, adjacent_pairs))

__attribute__((always_inline)) inline void attention_row_tiled_body(const float* query,
                                                                    const float* keys,
                                                                    const float* values, int count,
                                                                    int head_size, float scale,
                                                                    float* out) {
  constexpr int kTile = kTiledAttentionRows;  // positions per tile (= query rows per tile)
  thread_local std::vector<float> keys_by_dimension,
      accumulator;  // [head_size, kTile], [head_size]
  keys_by_dimension.resize(static_cast<size_t>(head_size) * kTile);
  accumulator.assign(head_size, 0.0f);
  float running_max = -INFINITY;
  float sum = 0.0f;
  for (int tile_start = 0; tile_start < count; tile_start += kTile) {
    const int visible = std::min(kTile, count - tile_start);
    for (int p = 0; p < visible; ++p) {
      const float* key = keys + static_cast<int64_t>(tile_start + p) * head_size;
      for (int d = 0; d < head_size; ++d) keys_by_dimension[d * kTile + p] = key[d];
    }
    // Scores: one multiply-add chain per position over the dimensions, in order (the GEMM
    // simd_gemm runs), then scaled; positions past the query are masked out.
    float scores[kTile];
    for (int p = 0; p < kTile; ++p) scores[p] = 0.0f;
    for (int d = 0; d < head_size; ++d) {
      const float q = query[d];
      const float* column = keys_by_dimension.data() + d * kTile;
      for (int p = 0; p < visible; ++p) scores[p] = std::fma(column[p], q, scores[p]);
    }
    float tile_max = -INFINITY;
    for (int p = 0; p < kTile; ++p) {
      scores[p] = p < visible ? scores[p] * scale : -INFINITY;
      tile_max = scores[p] > tile_max ? scores[p] : tile_max;
    }
    const float new_max = std::fmax(running_max, tile_max);
    if (new_max > running_max) {
      const float rescale = std::exp(running_max - new_max);
      for (int d = 0; d < head_size; ++d) accumulator[d] *= rescale;
      sum *= rescale;
    }
    running_max = new_max;
    // Weights through the vectorised exp, summed 16 at a time into a double.
    double tile_sum = 0.0;
    for (int p = 0; p < kTile; p += 16) {
      for (int l = 0; l < 16; ++l) scores[p + l] = vector_exp(scores[p + l] - running_max);
      tile_sum += sum_16_lanes(scores + p);
    }
    sum = static_cast<float>(sum + tile_sum);
    for (int p = 0; p < visible; ++p) {
      const float* value = values + static_cast<int64_t>(tile_start + p) * head_size;
      for (int d = 0; d < head_size; ++d) {
        accumulator[d] = std::fma(scores[p], value[d], accumulator[d]);
      }
    }
  }
  const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int d = 0; d < head_size; ++d) out[d] = accumulator[d] * inverse;
}

TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kAttention, void, attention_row_tiled,
                          (const float* query, const float* keys, const float* values, int count,
                           int head_size, float scale, float* out),
                          (query, keys, values, count, head_size, scale, out))

void attention_row(const float* query, const float* keys, const float* values, int count,
                   int head_size, float scale, float* out) {
  thread_local std::vector<float> accumulator;
  accumulator.resize(head_size);
  const AttentionPartial partial =
      attention_chunk(query, keys, values, 0, count, head_size, scale, accumulator.data());
  const float inverse = partial.sum == 0.0f ? 0.0f : 1.0f / partial.sum;
  for (int d = 0; d < head_size; ++d) out[d] = accumulator[d] * inverse;
}

void attention_row_split(const float* query, const float* keys, const float* values, int count,
                         int head_size, float scale, int chunk_size, float* out) {
  thread_local std::vector<float> chunk, combined;
  chunk.resize(head_size);
  combined.assign(head_size, 0.0f);
  float running_max = -INFINITY;
  float sum = 0.0f;
  for (int begin = 0; begin < count; begin += chunk_size) {
    const AttentionPartial partial =
        attention_chunk(query, keys, values, begin, std::min(count, begin + chunk_size), head_size,
                        scale, chunk.data());
    if (partial.sum == 0.0f) continue;
    const float new_max = std::fmax(running_max, partial.max);
    const float old_scale = std::exp(running_max - new_max);
    const float new_scale = std::exp(partial.max - new_max);
    for (int d = 0; d < head_size; ++d) {
      combined[d] = std::fma(combined[d], old_scale, chunk[d] * new_scale);
    }
    sum = std::fma(sum, old_scale, partial.sum * new_scale);
    running_max = new_max;
  }
  if (sum != 0.0f) {
    const float inverse = 1.0f / sum;
    for (int d = 0; d < head_size; ++d) combined[d] *= inverse;
  }
  std::copy(combined.begin(), combined.end(), out);
}

}  // namespace tachyon::kernels::llamacpp
