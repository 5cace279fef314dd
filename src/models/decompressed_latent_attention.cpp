#include "models/decompressed_latent_attention.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/elementwise.h"

namespace tachyon {

namespace {

// Query tokens per block: the block's scores are computed over the positions its last token
// sees, so causal attention from an empty cache wastes at most a block's triangle.
constexpr int kBlockTokens = 128;

int64_t padded(int64_t positions) {
  constexpr int64_t pad = DecompressedLatentAttention::kPositionPad;
  return (positions + pad - 1) / pad * pad;
}

// rows [0, count) split evenly over the pool's threads (one thread for few rows).
template <typename Body>
void for_rows(int64_t count, ThreadPool& pool, const Body& body) {
  if (count < 16 || pool.num_threads() == 1) {
    for (int64_t r = 0; r < count; ++r) body(r);
    return;
  }
  pool.run([&](int thread_index, int num_threads) {
    const int64_t end = count * (thread_index + 1) / num_threads;
    for (int64_t r = count * thread_index / num_threads; r < end; ++r) body(r);
  });
}

double visible_pairs(int start_position, int num_tokens) {
  return static_cast<double>(num_tokens) * start_position +
         0.5 * static_cast<double>(num_tokens) * (num_tokens + 1);
}

}  // namespace

double DecompressedLatentAttention::multiply_adds(const LatentAttentionConfig& mla,
                                                  int start_position, int num_tokens) {
  const double positions = static_cast<double>(start_position) + num_tokens;
  const double decompress =
      positions * (mla.qk_nope_head_dim + mla.v_head_dim) * static_cast<double>(mla.kv_lora_rank);
  // Scores over the positions each block's last token sees; values over all of them, padded.
  const double scores =
      (visible_pairs(start_position, num_tokens) +
       0.5 * static_cast<double>(num_tokens) * std::min(num_tokens, kBlockTokens)) *
      mla.qk_head_dim();
  const double values =
      static_cast<double>(num_tokens) * static_cast<double>(padded(static_cast<int64_t>(positions))) *
      mla.v_head_dim;
  return decompress + scores + values;
}

double DecompressedLatentAttention::absorbed_multiply_adds(const LatentAttentionConfig& mla,
                                                           int start_position, int num_tokens) {
  // Each query folded into the latent space and each output latent through W_UV, then scores
  // and sums over the whole latent row per pair.
  const double per_token =
      (mla.qk_nope_head_dim + mla.v_head_dim) * static_cast<double>(mla.kv_lora_rank);
  return num_tokens * per_token + visible_pairs(start_position, num_tokens) *
                                      (mla.latent_size() + mla.kv_lora_rank);
}

void DecompressedLatentAttention::run(const LatentAttentionConfig& mla,
                                      const std::vector<kernels::WeightMatrix>& key_up,
                                      const std::vector<kernels::WeightMatrix>& value_up,
                                      int first_head, int heads, float scale, const Run& run,
                                      ThreadPool& pool) {
  const int64_t kv_lora = mla.kv_lora_rank;
  const int64_t latent_size = mla.latent_size();
  const int64_t nope = mla.qk_nope_head_dim;
  const int64_t rope = mla.qk_rope_head_dim;
  const int64_t qk = mla.qk_head_dim();
  const int64_t value_dim = mla.v_head_dim;
  const int64_t positions = static_cast<int64_t>(run.start_position) + run.num_tokens;
  const int64_t padded_positions = padded(positions);
  // The latents' first kv_lora_rank columns, contiguous (the matmuls' input), zero rows after
  // `positions` (the values' padding).
  latents_.resize(static_cast<size_t>(padded_positions * kv_lora));
  for_rows(padded_positions, pool, [&](int64_t p) {
    float* row = latents_.data() + p * kv_lora;
    if (p < positions) {
      std::memcpy(row, run.latents + p * latent_size, kv_lora * sizeof(float));
    } else {
      std::fill_n(row, kv_lora, 0.0f);
    }
  });
  keys_.resize(static_cast<size_t>(positions * qk));
  values_.resize(static_cast<size_t>(std::max(padded_positions * value_dim, positions * nope)));
  values_by_dim_.resize(static_cast<size_t>(value_dim * padded_positions));
  const int block_tokens = std::min(run.num_tokens, kBlockTokens);
  queries_.resize(static_cast<size_t>(block_tokens * qk));
  scores_.resize(static_cast<size_t>(block_tokens * positions));
  weights_.resize(static_cast<size_t>(block_tokens * padded_positions));
  outputs_.resize(static_cast<size_t>(block_tokens * value_dim));
  for (int h = 0; h < heads; ++h) {
    const int head = first_head + h;
    // Keys: the head's nope part decompressed (into values_, as scratch), the shared rotary
    // part after it.
    TACHYON_CHECK(key_up[head].rows == nope && key_up[head].cols == kv_lora);
    kernels::matmul(key_up[head], latents_.data(), positions, values_.data(), pool);
    for_rows(positions, pool, [&](int64_t p) {
      float* key = keys_.data() + p * qk;
      std::memcpy(key, values_.data() + p * nope, nope * sizeof(float));
      std::memcpy(key + nope, run.latents + p * latent_size + kv_lora, rope * sizeof(float));
    });
    // Values: decompressed for every padded position (zero latents give zero values), then
    // by dimension for the output product.
    kernels::matmul(value_up[head], latents_.data(), padded_positions, values_.data(), pool);
    for_rows(value_dim, pool, [&](int64_t d) {
      float* row = values_by_dim_.data() + d * padded_positions;
      for (int64_t p = 0; p < padded_positions; ++p) row[p] = values_.data()[p * value_dim + d];
    });
    const kernels::WeightMatrix values_matrix{DType::kF32,
                                              reinterpret_cast<const uint8_t*>(values_by_dim_.data()),
                                              value_dim, padded_positions};
    for (int t0 = 0; t0 < run.num_tokens; t0 += kBlockTokens) {
      const int tokens = std::min(kBlockTokens, run.num_tokens - t0);
      // Positions the block's last token sees.
      const int64_t seen = static_cast<int64_t>(run.start_position) + t0 + tokens;
      for (int i = 0; i < tokens; ++i) {
        const int64_t t = t0 + i;
        float* query = queries_.data() + static_cast<int64_t>(i) * qk;
        std::memcpy(query, run.nope_queries + t * run.nope_stride + h * run.nope_head_stride,
                    nope * sizeof(float));
        std::memcpy(query + nope,
                    run.rotary_queries + t * run.rotary_stride + h * run.rotary_head_stride,
                    rope * sizeof(float));
      }
      const kernels::WeightMatrix keys_matrix{
          DType::kF32, reinterpret_cast<const uint8_t*>(keys_.data()), seen, qk};
      kernels::matmul(keys_matrix, queries_.data(), tokens, scores_.data(), pool);
      for_rows(tokens, pool, [&](int64_t i) {
        const int64_t visible = static_cast<int64_t>(run.start_position) + t0 + i + 1;
        float* weights = weights_.data() + i * padded_positions;
        std::memcpy(weights, scores_.data() + i * seen, visible * sizeof(float));
        kernels::scaled_softmax(weights, visible, scale);
        std::fill(weights + visible, weights + padded_positions, 0.0f);
      });
      kernels::matmul(values_matrix, weights_.data(), tokens, outputs_.data(), pool);
      for (int i = 0; i < tokens; ++i) {
        std::memcpy(run.out + (t0 + i) * run.out_stride + h * value_dim,
                    outputs_.data() + static_cast<int64_t>(i) * value_dim,
                    value_dim * sizeof(float));
      }
    }
  }
}

}  // namespace tachyon
