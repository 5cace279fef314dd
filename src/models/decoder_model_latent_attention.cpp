// DecoderModel's multi-head latent attention (MLA): the absorbed block every token runs, and the
// choice of the decompressed path for long runs (DecompressedLatentAttention); split out of
// decoder_model.cpp, which was past 1500 lines.
#include "models/decoder_model.h"

#include <cstring>

#include "kernels/reference/dequantize.h"
#include "models/layers.h"

namespace tachyon {

Status DecoderModel::set_mla_attention(MlaAttention mode, double cost_factor) {
  const LatentAttentionConfig& mla = config_.mla;
  if (mode != MlaAttention::kAbsorbed && !mla.enabled()) {
    return invalid_argument("--mla-attention: the model has no multi-head latent attention (MLA)");
  }
  if (mode != MlaAttention::kAbsorbed) {
    // W_UK from its transpose (key_absorb: [kv_lora_rank, qk_nope_head_dim], as stored).
    const int64_t latent = mla.kv_lora_rank;
    const int64_t nope = mla.qk_nope_head_dim;
    for (int i = shard_.first_layer; i < shard_.end_layer; ++i) {
      LatentAttentionWeights& layer = weights_.layers[i].mla;
      if (!layer.key_up.empty()) continue;
      std::vector<float> transposed(static_cast<size_t>(latent * nope));
      for (const kernels::WeightMatrix& absorb : layer.key_absorb) {
        if (absorb.data == nullptr) {  // another TP rank's head
          layer.key_up.emplace_back();
          continue;
        }
        TACHYON_RETURN_IF_ERROR(
            reference::dequantize(absorb.type, absorb.data, transposed.data(), latent * nope));
        auto bytes = std::make_unique<std::vector<uint8_t>>(transposed.size() * sizeof(float));
        float* key_up = reinterpret_cast<float*>(bytes->data());
        for (int64_t n = 0; n < nope; ++n) {
          for (int64_t c = 0; c < latent; ++c) key_up[n * latent + c] = transposed[c * nope + n];
        }
        layer.key_up.push_back({DType::kF32, bytes->data(), nope, latent});
        weights_.converted_bytes.push_back(std::move(bytes));
      }
    }
  }
  mla_attention_ = mode;
  decompressed_cost_factor_ = cost_factor;
  return Status();
}

bool DecoderModel::decompresses(int start_position, int num_tokens) const {
  switch (mla_attention_) {
    case MlaAttention::kAbsorbed:
      return false;
    case MlaAttention::kDecompressed:
      return true;
    case MlaAttention::kAuto:
      return decompressed_cost_factor_ * DecompressedLatentAttention::multiply_adds(
                                           config_.mla, start_position, num_tokens) <
             DecompressedLatentAttention::absorbed_multiply_adds(config_.mla, start_position,
                                                                 num_tokens);
  }
  return false;
}

void DecoderModel::multiply_head(const kernels::WeightMatrix& w, const float* x,
                                 int64_t x_stride, int num_tokens, float* out,
                                 int64_t out_stride, ThreadPool& pool) {
  Workspace& ws = workspace_;
  for (int t = 0; t < num_tokens; ++t) {
    std::memcpy(ws.head_input.data() + t * w.cols, x + t * x_stride, w.cols * sizeof(float));
  }
  kernels::matmul(w, ws.head_input.data(), num_tokens, ws.head_output.data(), pool);
  for (int t = 0; t < num_tokens; ++t) {
    std::memcpy(out + t * out_stride, ws.head_output.data() + t * w.rows, w.rows * sizeof(float));
  }
}

void DecoderModel::latent_attention_block(const LayerWeights& layer, int layer_index,
                                          int num_tokens, bool add_projected, StoreTokens store,
                                          Attend attend, ThreadPool& pool) {
  Workspace& w = workspace_;
  const LatentAttentionWeights& weights = layer.mla;
  const LatentAttentionConfig& mla = config_.mla;
  // This TP rank's heads (all of them in one process); every rank has the whole latent.
  const int heads = shard_.local_heads();
  const int first_head = shard_.first_head();
  const int64_t latent_size = mla.latent_size();
  const int64_t query_stride = static_cast<int64_t>(heads) * mla.qk_head_dim();
  const int64_t absorbed_stride = static_cast<int64_t>(heads) * latent_size;
  // The queries (or their low-rank first half) and each token's latent from the normed input.
  const bool low_rank_query = mla.q_lora_rank > 0;
  const kernels::MatmulProduct first[] = {
      low_rank_query ? kernels::MatmulProduct{&weights.query_a, w.query_a.data()}
                     : kernels::MatmulProduct{&weights.query, w.query_heads.data()},
      {&weights.kv_a, w.latent.data()}};
  add_and_normalize(layer.attention_norm, add_projected, first, num_tokens, pool);
  multiply_normed(first, num_tokens, pool);
  if (low_rank_query) {
    for_token_ranges(num_tokens, pool, [&](int begin, int end) {
      for (int t = begin; t < end; ++t) {
        float* row = w.query_a.data() + static_cast<int64_t>(t) * mla.q_lora_rank;
        rms_norm(row, weights.query_a_norm, mla.q_lora_rank, mla.latent_norm_epsilon, row);
      }
    });
    const kernels::MatmulProduct query_b[] = {{&weights.query_b, w.query_heads.data()}};
    multiply(query_b, w.query_a.data(), num_tokens, pool);
  }
  // Per token: the cached row is the normalised latent then its rotated shared key part (also
  // the value: the cache stores it once, and attention's output latent is what W_UV reads);
  // each head's query gets its rotated part after the latent dimensions its absorbed part
  // will fill.
  const int pairs = mla.qk_rope_head_dim / 2;
  for_token_ranges(num_tokens, pool, [&](int begin, int end) {
    for (int t = begin; t < end; ++t) {
      const float* cos_row = w.rope_cos.data() + static_cast<int64_t>(t) * pairs;
      const float* sin_row = w.rope_sin.data() + static_cast<int64_t>(t) * pairs;
      const float* latent = w.latent.data() + t * latent_size;
      float* key = w.key.data() + t * latent_size;
      rms_norm(latent, weights.kv_a_norm, mla.kv_lora_rank, mla.latent_norm_epsilon, key);
      std::memcpy(key + mla.kv_lora_rank, latent + mla.kv_lora_rank,
                  mla.qk_rope_head_dim * sizeof(float));
      rope_.rotate(key + mla.kv_lora_rank, 1, cos_row, sin_row);
      for (int h = 0; h < heads; ++h) {
        float* rotary = w.query.data() + t * absorbed_stride + h * latent_size + mla.kv_lora_rank;
        std::memcpy(rotary,
                    w.query_heads.data() + t * query_stride + h * mla.qk_head_dim() +
                        mla.qk_nope_head_dim,
                    mla.qk_rope_head_dim * sizeof(float));
        rope_.rotate(rotary, 1, cos_row, sin_row);
      }
      store(layer_index, t, t + 1);
    }
  });
  // The absorbed path's steps run on every token unless all take the decompressed one (their
  // rows of the others are overwritten below).
  int decompressed_tokens = 0;
  for (const Workspace::LatentRun& run : w.latent_runs) decompressed_tokens += run.num_tokens;
  const bool absorb = decompressed_tokens < num_tokens;
  // Absorption: head h's query in latent space is W_UK_h^T q_nope_h.
  for (int h = 0; absorb && h < heads; ++h) {
    multiply_head(weights.key_absorb[first_head + h], w.query_heads.data() + h * mla.qk_head_dim(),
                  query_stride, num_tokens, w.query.data() + h * latent_size, absorbed_stride,
                  pool);
  }
  attend(layer_index);
  // Each head's output latent (the first kv_lora_rank of its attention row) through W_UV_h.
  const int64_t values_stride = static_cast<int64_t>(heads) * mla.v_head_dim;
  for (int h = 0; absorb && h < heads; ++h) {
    multiply_head(weights.value_up[first_head + h], w.attention.data() + h * latent_size,
                  absorbed_stride, num_tokens, w.head_values.data() + h * mla.v_head_dim,
                  values_stride, pool);
  }
  for (size_t r = 0; r < w.latent_runs.size(); ++r) {
    const Workspace::LatentRun& run = w.latent_runs[r];
    DecompressedLatentAttention::Run input;
    input.num_tokens = run.num_tokens;
    input.start_position = run.start_position;
    input.latents = w.run_latents[r].data();
    input.nope_queries = w.query_heads.data() + run.first_token * query_stride;
    input.nope_stride = query_stride;
    input.nope_head_stride = mla.qk_head_dim();
    input.rotary_queries =
        w.query.data() + run.first_token * absorbed_stride + mla.kv_lora_rank;
    input.rotary_stride = absorbed_stride;
    input.rotary_head_stride = latent_size;
    input.out = w.head_values.data() + run.first_token * values_stride;
    input.out_stride = values_stride;
    decompressed_attention_.run(mla, weights.key_up, weights.value_up, first_head, heads,
                                attention_shape().scale, input, pool);
  }
  project_to_hidden(layer.attention_output, w.head_values.data(), head_value_rows_, num_tokens,
                    pool);
}

}  // namespace tachyon
