#include "models/decoder_model.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/llamacpp_arithmetic.h"
#include "kernels/reference/dequantize.h"
#include "models/layers.h"

namespace tachyon {

Result<std::unique_ptr<DecoderModel>> DecoderModel::load(const GgufFile& file,
                                                        std::optional<DType> quantize) {
  TACHYON_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_gguf(file));
  TACHYON_ASSIGN_OR_RETURN(DecoderWeights weights, DecoderWeights::load(file, config, quantize));
  return std::unique_ptr<DecoderModel>(new DecoderModel(std::move(config), std::move(weights)));
}

Result<std::unique_ptr<DecoderModel>> DecoderModel::load(const HfCheckpoint& checkpoint,
                                                        std::optional<DType> quantize) {
  TACHYON_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_hf_checkpoint(checkpoint));
  TACHYON_ASSIGN_OR_RETURN(DecoderWeights weights,
                           DecoderWeights::load(checkpoint, config, quantize));
  return std::unique_ptr<DecoderModel>(new DecoderModel(std::move(config), std::move(weights)));
}

DecoderModel::DecoderModel(ModelConfig config, DecoderWeights weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_(config_.rope, weights_.rope_frequency_factors) {}

Status DecoderModel::set_numerics(Numerics numerics) {
  if (numerics == Numerics::kLlamaCpp) {
    if (config_.rope.scaling == RopeScaling::kYarn) {
      return unsupported("llama.cpp numerics do not cover YaRN-scaled RoPE");
    }
    auto check = [](const kernels::WeightMatrix& w, std::string_view name) -> Status {
      if (kernels::llamacpp::matmul_supports(w.type)) return Status();
      return unsupported(fmt::format("llama.cpp numerics cover Q4_1 and Q8_0 weights; {} is {}",
                                       name, dtype_name(w.type)));
    };
    TACHYON_RETURN_IF_ERROR(check(weights_.output, "the output matrix"));
    for (const LayerWeights& layer : weights_.layers) {
      for (const kernels::WeightMatrix* w : {&layer.query, &layer.key, &layer.value,
                                             &layer.attention_output, &layer.gate, &layer.up,
                                             &layer.down}) {
        TACHYON_RETURN_IF_ERROR(check(*w, "a layer matrix"));
      }
    }
  }
  numerics_ = numerics;
  return Status();
}

void DecoderModel::normalize(const float* x, const float* weight, int size, float* out) const {
  if (numerics_ == Numerics::kLlamaCpp) {
    kernels::llamacpp::rms_norm(x, weight, size, config_.rms_norm_epsilon, out);
  } else {
    rms_norm(x, weight, size, config_.rms_norm_epsilon, out);
  }
}

void DecoderModel::for_token_ranges(int num_tokens, ThreadPool& pool,
                                    FunctionRef<void(int first, int end)> body) {
  constexpr int kParallelTokens = 32;
  if (num_tokens < kParallelTokens || pool.num_threads() == 1) return body(0, num_tokens);
  pool.run([&](int thread_index, int num_threads) {
    const int64_t tokens = num_tokens;
    const int first = static_cast<int>(tokens * thread_index / num_threads);
    const int end = static_cast<int>(tokens * (thread_index + 1) / num_threads);
    if (first < end) body(first, end);
  });
}

void DecoderModel::multiply(std::span<const kernels::MatmulProduct> products, const float* x,
                            int num_tokens, ThreadPool& pool) const {
  if (numerics_ == Numerics::kLlamaCpp) {
    for (const kernels::MatmulProduct& product : products) {
      kernels::llamacpp::matmul(*product.w, x, num_tokens, product.y, pool);
    }
  } else if (products.size() == 1) {
    kernels::matmul(*products[0].w, x, num_tokens, products[0].y, pool);
  } else {
    kernels::matmul_many(products, x, num_tokens, pool);
  }
}

void DecoderModel::rotate(float* heads, int num_heads, const float* cos_row,
                          const float* sin_row) const {
  if (numerics_ == Numerics::kLlamaCpp) {
    kernels::llamacpp::rope_rotate(heads, num_heads, config_.head_size, cos_row, sin_row,
                                   config_.rope.layout == RopeLayout::kAdjacentPairs);
  } else {
    rope_.rotate(heads, num_heads, cos_row, sin_row);
  }
}

void DecoderModel::embed(std::span<const TokenIndex> tokens, float* out) const {
  const kernels::WeightMatrix& table = weights_.token_embedding;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const uint8_t* row = table.data + static_cast<size_t>(tokens[t]) * table.row_bytes();
    // Every matmul-capable type has a dequantizer, so this cannot fail for a loaded model.
    Status status = reference::dequantize(table.type, row, out + t * table.cols, table.cols);
    (void)status;
  }
}

Status DecoderModel::forward(std::span<const TokenIndex> tokens, int start_position,
                             KvCache& cache, ThreadPool& pool, int num_logits,
                             std::vector<float>& logits) {
  const int num_tokens = static_cast<int>(tokens.size());
  if (num_tokens == 0) return invalid_argument("forward needs at least one token");
  if (num_logits < 0 || num_logits > num_tokens) {
    return invalid_argument(fmt::format("asked for the logits of {} of {} tokens", num_logits,
                                        num_tokens));
  }
  if (start_position < 0 || start_position + num_tokens > cache.capacity()) {
    return out_of_range(fmt::format("positions {}..{} do not fit in a cache of {} tokens",
                                    start_position, start_position + num_tokens - 1,
                                    cache.capacity()));
  }
  for (TokenIndex token : tokens) {
    if (token < 0 || token >= config_.vocab_size) {
      return invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", token,
                                          config_.vocab_size - 1));
    }
  }

  std::vector<int>& positions = workspace_.positions;
  positions.resize(num_tokens);
  for (int t = 0; t < num_tokens; ++t) positions[t] = start_position + t;
  const AttentionShape shape = attention_shape();
  const int64_t kv_size = config_.kv_size();
  auto store = [&](int layer, int first, int end) {
    const int64_t offset = first * kv_size;
    cache.store(layer, start_position + first, end - first, workspace_.key.data() + offset,
                workspace_.value.data() + offset);
  };
  auto prefetch_store = [&](int layer) {
    cache.prefetch_store(layer, start_position, num_tokens);
  };
  // This batch's keys and values are in the cache: every query attends over it.
  run_layers(tokens, store, prefetch_store, [&](int layer) {
    Workspace& w = workspace_;
    if (numerics_ == Numerics::kLlamaCpp) {
      causal_attention_llamacpp(shape, w.query.data(), num_tokens, start_position, cache, layer,
                                w.attention.data(), pool);
    } else {
      causal_attention(shape, w.query.data(), num_tokens, start_position, cache, layer,
                       w.attention.data(), pool);
    }
  }, pool);
  std::vector<int> rows(num_logits);
  for (int i = 0; i < num_logits; ++i) rows[i] = num_tokens - num_logits + i;
  project_logits(rows, logits, pool);
  return Status();
}

Status DecoderModel::forward_batch(const ForwardBatch& batch, PagedKvCache& cache,
                                   ThreadPool& pool, std::vector<float>& logits) {
  const int num_tokens = batch.num_tokens();
  if (num_tokens == 0) return invalid_argument("forward needs at least one token");
  if (static_cast<int>(batch.positions.size()) != num_tokens ||
      static_cast<int>(batch.slots.size()) != num_tokens || batch.block_size != cache.block_size()) {
    return invalid_argument("inconsistent forward batch");
  }
  for (int32_t token : batch.tokens) {
    if (token < 0 || token >= config_.vocab_size) {
      return invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", token,
                                          config_.vocab_size - 1));
    }
  }
  workspace_.positions = batch.positions;
  const AttentionShape shape = attention_shape();
  const int64_t kv_size = config_.kv_size();
  auto store = [&](int layer, int first, int end) {
    const int64_t offset = first * kv_size;
    cache.store(layer, std::span<const int64_t>(batch.slots).subspan(first, end - first),
                workspace_.key.data() + offset, workspace_.value.data() + offset);
  };
  auto prefetch_store = [&](int layer) { cache.prefetch_store(layer, batch.slots); };
  run_layers(batch.tokens, store, prefetch_store, [&](int layer) {
    Workspace& w = workspace_;
    paged_attention(shape, w.query.data(), batch, cache, layer, w.attention.data(), pool);
  }, pool);
  project_logits(batch.logits_tokens, logits, pool);
  return Status();
}

AttentionShape DecoderModel::attention_shape() const {
  return AttentionShape{config_.num_heads, config_.num_kv_heads, config_.head_size,
                        1.0f / std::sqrt(static_cast<float>(config_.head_size))};
}

void DecoderModel::run_layers(std::span<const TokenIndex> tokens, StoreTokens store,
                              PrefetchStore prefetch_store, Attend attend, ThreadPool& pool) {
  const int num_tokens = static_cast<int>(tokens.size());
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  w.residual.resize(num_tokens * hidden);
  w.normed.resize(num_tokens * hidden);
  w.query.resize(static_cast<int64_t>(num_tokens) * config_.q_size());
  w.key.resize(static_cast<int64_t>(num_tokens) * config_.kv_size());
  w.value.resize(static_cast<int64_t>(num_tokens) * config_.kv_size());
  w.attention.resize(static_cast<int64_t>(num_tokens) * config_.q_size());
  w.projected.resize(num_tokens * hidden);
  w.gate.resize(static_cast<int64_t>(num_tokens) * config_.ffn_size);
  w.up.resize(static_cast<int64_t>(num_tokens) * config_.ffn_size);
  rope_.compute_angles(w.positions, w.rope_cos, w.rope_sin);

  embed(tokens, w.residual.data());
  for (int i = 0; i < config_.num_layers; ++i) {
    attention_block(weights_.layers[i], i, num_tokens, i > 0, store, prefetch_store, attend,
                    pool);
    feed_forward_block(weights_.layers[i], num_tokens, pool);
  }
  add_residual(num_tokens, pool);  // the last feed-forward block's output
}

void DecoderModel::add_and_normalize(const float* weight, bool add_projected,
                                     std::span<const kernels::MatmulProduct> consumers,
                                     int num_tokens, ThreadPool& pool) {
  Workspace& w = workspace_;
  const int hidden = config_.hidden_size;
  // Native numerics quantize each row for its consumers while it is in cache (the same bits as
  // matmul_many quantizing the whole batch later, without that pass and its round of the pool).
  kernels::MatmulInput* input = nullptr;
  if (numerics_ == Numerics::kNative) {
    input = &w.normed_input;
    input->prepare(kernels::active_kernel_level(), consumers, w.normed.data(), num_tokens);
  }
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    for (int t = first; t < end; ++t) {
      float* residual = w.residual.data() + static_cast<int64_t>(t) * hidden;
      const float* projected = w.projected.data() + static_cast<int64_t>(t) * hidden;
      float* normed = w.normed.data() + static_cast<int64_t>(t) * hidden;
      if (add_projected && numerics_ != Numerics::kLlamaCpp) {
        kernels::add_rms_norm(residual, projected, weight, hidden, config_.rms_norm_epsilon,
                              normed);
      } else {
        if (add_projected) add_in_place(residual, projected, hidden);
        normalize(residual, weight, hidden, normed);
      }
      if (input != nullptr) input->quantize_rows(t, t + 1);
    }
  });
}

void DecoderModel::multiply_normed(std::span<const kernels::MatmulProduct> products,
                                   int num_tokens, ThreadPool& pool,
                                   const kernels::RowEpilogue* epilogue) {
  if (numerics_ == Numerics::kLlamaCpp) {
    TACHYON_CHECK(epilogue == nullptr);
    return multiply(products, workspace_.normed.data(), num_tokens, pool);
  }
  kernels::matmul_many(products, workspace_.normed_input, pool, epilogue);
}

void DecoderModel::project_logits(std::span<const int> rows, std::vector<float>& logits,
                                  ThreadPool& pool) {
  // Final norm and the output projection, only for the tokens whose logits are wanted.
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  const int count = static_cast<int>(rows.size());
  logits.resize(static_cast<size_t>(count) * config_.vocab_size);
  if (count == 0) return;
  const kernels::MatmulProduct output[] = {{&weights_.output, logits.data()}};
  kernels::MatmulInput* input = nullptr;
  if (numerics_ == Numerics::kNative) {
    input = &w.normed_input;
    input->prepare(kernels::active_kernel_level(), output, w.normed.data(), count);
  }
  for (int i = 0; i < count; ++i) {
    normalize(w.residual.data() + rows[i] * hidden, weights_.output_norm,
              static_cast<int>(hidden), w.normed.data() + i * hidden);
    if (input != nullptr) input->quantize_rows(i, i + 1);
  }
  multiply_normed(output, count, pool);
}

void DecoderModel::attention_block(const LayerWeights& layer, int layer_index, int num_tokens,
                                   bool add_projected, StoreTokens store,
                                   PrefetchStore prefetch_store, Attend attend, ThreadPool& pool) {
  Workspace& w = workspace_;
  const int head_size = config_.head_size;
  const int64_t q_size = config_.q_size();
  const int64_t kv_size = config_.kv_size();
  const kernels::MatmulProduct qkv[] = {
      {&layer.query, w.query.data()}, {&layer.key, w.key.data()}, {&layer.value, w.value.data()}};
  // A few tokens' store would wait on every line it writes, one by one; asked for now, the
  // lines arrive during the norm and the q/k/v product (default model tg128 on a Xeon VM,
  // means of 5 runs: 377 -> 385 tokens/s; the paged cache's single decode unchanged). A
  // prompt's store reuses each line many times.
  if (num_tokens <= kPrefetchStoreTokens) prefetch_store(layer_index);
  add_and_normalize(layer.attention_norm, add_projected, qkv, num_tokens, pool);
  multiply_normed(qkv, num_tokens, pool);
  // Each token's query, key and value rows in one pass, while they are in cache: biases
  // (Qwen2), per-head RMSNorm (Qwen3), RoPE, then the keys and values into the cache.
  const int pairs = head_size / 2;
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    for (int t = first; t < end; ++t) {
      float* query = w.query.data() + t * q_size;
      float* key = w.key.data() + t * kv_size;
      if (config_.qkv_bias) {
        add_in_place(query, layer.query_bias, q_size);
        add_in_place(key, layer.key_bias, kv_size);
        add_in_place(w.value.data() + t * kv_size, layer.value_bias, kv_size);
      }
      if (config_.qk_norm) {
        for (int h = 0; h < config_.num_heads; ++h) {
          float* head = query + static_cast<int64_t>(h) * head_size;
          normalize(head, layer.query_norm, head_size, head);
        }
        for (int h = 0; h < config_.num_kv_heads; ++h) {
          float* head = key + static_cast<int64_t>(h) * head_size;
          normalize(head, layer.key_norm, head_size, head);
        }
      }
      const float* cos_row = w.rope_cos.data() + static_cast<int64_t>(t) * pairs;
      const float* sin_row = w.rope_sin.data() + static_cast<int64_t>(t) * pairs;
      rotate(query, config_.num_heads, cos_row, sin_row);
      rotate(key, config_.num_kv_heads, cos_row, sin_row);
      store(layer_index, t, t + 1);
    }
  });

  attend(layer_index);

  const kernels::MatmulProduct output[] = {{&layer.attention_output, w.projected.data()}};
  multiply(output, w.attention.data(), num_tokens, pool);
}

void DecoderModel::add_residual(int num_tokens, ThreadPool& pool) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    add_in_place(w.residual.data() + first * hidden, w.projected.data() + first * hidden,
                 (end - first) * hidden);
  });
}

void DecoderModel::feed_forward_block(const LayerWeights& layer, int num_tokens, ThreadPool& pool) {
  Workspace& w = workspace_;
  const kernels::MatmulProduct gate_up[] = {{&layer.gate, w.gate.data()},
                                             {&layer.up, w.up.data()}};
  add_and_normalize(layer.ffn_norm, true, gate_up, num_tokens, pool);
  const int64_t ffn_size = config_.ffn_size;
  if (numerics_ == Numerics::kLlamaCpp) {
    multiply_normed(gate_up, num_tokens, pool);
    for_token_ranges(num_tokens, pool, [&](int first, int end) {
      // Row by row: llama.cpp's vectorised part of each row ends at a multiple of 16.
      for (int t = first; t < end; ++t) {
        kernels::llamacpp::swiglu(w.gate.data() + t * ffn_size, w.up.data() + t * ffn_size,
                                  ffn_size, w.gate.data() + t * ffn_size);
      }
    });
  } else {
    // SwiGLU by each thread over the gate and up rows it has just computed (element-wise, so
    // the same bits as over whole rows), while they are in its cache and without a serial step.
    auto swiglu_rows = [&](int64_t begin, int64_t end) {
      for (int t = 0; t < num_tokens; ++t) {
        float* gate = w.gate.data() + t * ffn_size + begin;
        swiglu(gate, w.up.data() + t * ffn_size + begin, end - begin, gate);
      }
    };
    const kernels::RowEpilogue epilogue(swiglu_rows);
    multiply_normed(gate_up, num_tokens, pool, &epilogue);
  }
  const kernels::MatmulProduct down[] = {{&layer.down, w.projected.data()}};
  multiply(down, w.gate.data(), num_tokens, pool);
}

}  // namespace tachyon
