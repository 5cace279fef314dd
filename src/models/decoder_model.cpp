#include "models/decoder_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/llamacpp_arithmetic.h"
#include "kernels/reference/dequantize.h"
#include "models/expert_router.h"
#include "models/layers.h"
#include "models/shard_call.h"

namespace tachyon {

Result<std::unique_ptr<DecoderModel>> DecoderModel::load(const GgufFile& file,
                                                        std::optional<DType> quantize,
                                                        const MemoryAmount& experts_memory,
                                                        const ModelShard* shard) {
  TACHYON_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_gguf(file));
  TACHYON_ASSIGN_OR_RETURN(DecoderWeights weights,
                           DecoderWeights::load(file, config, quantize, experts_memory, shard));
  ModelShard part = shard != nullptr ? *shard : ModelShard::whole(config);
  std::unique_ptr<DecoderModel> model(
      new DecoderModel(std::move(config), std::move(weights), std::move(part)));
  model->file_ = &file;
  return model;
}

Result<std::unique_ptr<DecoderModel>> DecoderModel::load(const HfCheckpoint& checkpoint,
                                                        std::optional<DType> quantize,
                                                        const ModelShard* shard) {
  TACHYON_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_hf_checkpoint(checkpoint));
  TACHYON_ASSIGN_OR_RETURN(DecoderWeights weights,
                           DecoderWeights::load(checkpoint, config, quantize, shard));
  ModelShard part = shard != nullptr ? *shard : ModelShard::whole(config);
  return std::unique_ptr<DecoderModel>(
      new DecoderModel(std::move(config), std::move(weights), std::move(part)));
}

DecoderModel::~DecoderModel() {
  if (shard_.distributed() && shard_.leader()) send_shard_call(*shard_.world, ShardCall{});
}

DecoderModel::DecoderModel(ModelConfig config, DecoderWeights weights, ModelShard shard)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      shard_(std::move(shard)),
      rope_(config_.rope, weights_.rope_frequency_factors),
      local_rope_(config_.local_rope, config_.local_rope.has_frequency_factors
                                          ? std::span<const float>(weights_.rope_frequency_factors)
                                          : std::span<const float>()) {
  query_rows_.begin.clear();
  head_value_rows_.begin.clear();
  for (int64_t heads : shard_.heads.begin) {
    query_rows_.begin.push_back(heads * config_.head_size);
    head_value_rows_.begin.push_back(heads * config_.mla.v_head_dim);
  }
  if (config_.moe.enabled()) {
    std::vector<int> moe_layers;
    for (int i = 0; i < config_.num_layers + config_.num_mtp_layers; ++i) {
      if (config_.moe.layer_has_experts(i)) moe_layers.push_back(i);
    }
    expert_load_ = ExpertLoad(std::move(moe_layers), config_.moe.num_experts);
  }
}

Status DecoderModel::set_numerics(Numerics numerics) {
  if (numerics == Numerics::kLlamaCpp) {
    if (shard_.distributed()) return unsupported("llama.cpp numerics run in one process");
    if (config_.mla.enabled() || config_.moe.enabled()) {
      return unsupported("llama.cpp numerics cover dense models without MLA");
    }
    if (config_.rope.scaling == RopeScaling::kYarn) {
      return unsupported("llama.cpp numerics do not cover YaRN-scaled RoPE");
    }
    if (config_.post_norms || config_.ffn_activation != FeedForwardActivation::kSilu) {
      return unsupported("llama.cpp numerics do not cover Gemma's post norms and GeGLU");
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

void DecoderModel::shift_keys(float* keys, int count, int delta, int cache_layer) const {
  const RotaryEmbedding& rope =
      config_.layer_is_local(shard_.first_layer + cache_layer) ? local_rope_ : rope_;
  std::vector<float> cos_row, sin_row;
  const int position = -delta;
  rope.compute_angles(std::span(&position, 1), cos_row, sin_row);
  // Stored keys already carry YaRN's attention factor: turn them by the bare rotation.
  const float factor = rope.attention_factor();
  for (size_t j = 0; j < cos_row.size(); ++j) {
    cos_row[j] /= factor;
    sin_row[j] /= factor;
  }
  // The cache's heads: a tensor-parallel shard's own.
  const int kv_heads = attention_shape().num_kv_heads;
  const int kv_size = config_.mla.enabled() ? config_.kv_size() : kv_heads * config_.head_size;
  for (int t = 0; t < count; ++t) {
    float* row = keys + static_cast<int64_t>(t) * kv_size;
    if (config_.mla.enabled()) {
      rope_.rotate(row + config_.mla.kv_lora_rank, 1, cos_row.data(), sin_row.data());
    } else {
      rotate(row, kv_heads, cos_row.data(), sin_row.data());
    }
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

void DecoderModel::embed(const kernels::WeightMatrix& table, std::span<const TokenIndex> tokens,
                         float* out) const {
  // A shard's table starts at its first vocabulary row (the whole table: 0).
  const int64_t first = table.rows == config_.vocab_size ? 0
                                                         : shard_.vocab_rows.first(shard_.tp_rank);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t index = tokens[t] - first;
    if (index < 0 || index >= table.rows) {
      std::fill_n(out + t * table.cols, table.cols, 0.0f);
      continue;
    }
    const uint8_t* row = table.data + static_cast<size_t>(index) * table.row_bytes();
    // Every matmul-capable type has a dequantizer, so this cannot fail for a loaded model.
    Status status = reference::dequantize(table.type, row, out + t * table.cols, table.cols);
    (void)status;
    if (config_.embedding_scale != 1.0f) {
      for (int64_t c = 0; c < table.cols; ++c) out[t * table.cols + c] *= config_.embedding_scale;
    }
  }
  if (table.rows != config_.vocab_size) {
    shard_.tensor_group->all_reduce_sum(out, tokens.size() * static_cast<size_t>(table.cols));
  }
}

namespace {

// Each rank's block of a [num_tokens, split.total()] product's columns, rank after rank: its
// size and offset in floats.
void exchange_layout(const RowSplit& split, int num_tokens, std::vector<int>& counts,
                     std::vector<int>& offsets) {
  counts.resize(split.parts());
  offsets.resize(split.parts());
  for (int p = 0; p < split.parts(); ++p) {
    counts[p] = static_cast<int>(split.count(p) * num_tokens);
    offsets[p] = static_cast<int>(split.first(p) * num_tokens);
  }
}

// Pipeline parallelism: a step (or a prompt pass) with enough tokens goes through the stages
// in pieces of about equal size, cut anywhere: while a stage runs piece k, the one before it
// runs k + 1. Up to kMicroBatchesPerStage pieces per stage while each keeps
// kMinMicroBatchTokens (a long prompt alone then takes (m + P - 1) / m of one stage's share
// instead of P of them; smaller pieces would compute less efficiently). {0, num_tokens}: too
// few tokens to cut. A piece of a prompt reads the earlier pieces' keys from the cache, as its
// next chunk would.
constexpr int kMicroBatchesPerStage = 2;
constexpr int kMinMicroBatchTokens = 64;

std::vector<int> even_token_cuts(int num_tokens, int stages) {
  std::vector<int> cuts = {0};
  if (stages > 1 && num_tokens >= stages * kMinMicroBatchTokens) {
    const int parts = std::min(num_tokens / kMinMicroBatchTokens, stages * kMicroBatchesPerStage);
    for (int k = 1; k < parts; ++k) {
      cuts.push_back(static_cast<int>(static_cast<int64_t>(num_tokens) * k / parts));
    }
  }
  cuts.push_back(num_tokens);
  return cuts;
}

// out (f32 [num_tokens, split.total()]) from the rank-major blocks of `exchange`.
void unpack_rank_major(const float* exchange, int num_tokens, const RowSplit& split, float* out) {
  const int64_t total = split.total();
  for (int p = 0; p < split.parts(); ++p) {
    const int64_t cols = split.count(p);
    const float* from = exchange + split.first(p) * num_tokens;
    for (int t = 0; t < num_tokens; ++t) {
      std::memcpy(out + t * total + split.first(p), from + t * cols, cols * sizeof(float));
    }
  }
}

}  // namespace

void DecoderModel::gather_columns(const float* local, int num_tokens, const RowSplit& split,
                                  float* out) {
  std::vector<int> widths(split.parts()), columns(split.parts());
  for (int p = 0; p < split.parts(); ++p) {
    widths[p] = static_cast<int>(split.count(p));
    columns[p] = static_cast<int>(split.first(p));
  }
  shard_.tensor_group->all_gather_columns(local, num_tokens, widths, columns, out, split.total());
}

bool DecoderModel::gather_quantized_input(const kernels::MatmulProduct& product,
                                          const float* local, const RowSplit& split,
                                          int num_tokens, ThreadPool& pool) {
  if (numerics_ != Numerics::kNative) return false;
  if (ranks_quantize_input_ < 0) {
    // The level is per process (ranks on different hosts may differ), and every rank must take
    // the same path. Once: every rank's first call is this one.
    float portable = kernels::active_kernel_level() == kernels::KernelLevel::kReference ? 1 : 0;
    shard_.tensor_group->all_reduce_sum(&portable, 1);
    ranks_quantize_input_ = portable == 0 ? 1 : 0;
  }
  if (ranks_quantize_input_ == 0) return false;
  kernels::MatmulInput& input = workspace_.gathered_input;
  input.prepare(kernels::active_kernel_level(), std::span(&product, 1), nullptr, num_tokens);
  // From here on it depends only on the weight's type and the split: the same on every rank.
  const int64_t unit = input.column_unit();
  if (unit == 0) return false;
  for (int p = 0; p < split.parts(); ++p) {
    if (split.first(p) % unit != 0 || split.count(p) % unit != 0) return false;
  }
  std::vector<int64_t>& bytes = workspace_.block_bytes;
  bytes.resize(static_cast<size_t>(split.parts()));
  for (int p = 0; p < split.parts(); ++p) bytes[p] = input.block_bytes(split.count(p));
  AlignedVector<std::byte>& block = workspace_.quantized_block;
  block.resize(static_cast<size_t>(bytes[shard_.tp_rank]));
  input.quantize_block(local, split.count(shard_.tp_rank), block.data(), pool);
  shard_.tensor_group->all_gather_blocks(
      block.data(), bytes, [&](int rank, const std::byte* received) {
        input.place_block(received, split.count(rank), split.first(rank));
      });
  return true;
}

void DecoderModel::gather_columns_to_first(const float* local, int num_tokens,
                                           const RowSplit& split, float* out) {
  std::vector<int> counts, offsets;
  exchange_layout(split, num_tokens, counts, offsets);
  if (num_tokens == 1) {
    shard_.tensor_group->gather(local, counts, offsets, out, 0);
    return;
  }
  const bool root = shard_.tp_rank == 0;
  AlignedVector<float>& exchange = workspace_.exchange;
  if (root) exchange.resize(static_cast<size_t>(split.total()) * num_tokens);
  shard_.tensor_group->gather(local, counts, offsets, exchange.data(), 0);
  if (root) unpack_rank_major(exchange.data(), num_tokens, split, out);
}

void DecoderModel::receive_logits(int count, std::vector<float>& logits) {
  const size_t size = static_cast<size_t>(count) * config_.vocab_size;
  const int last = shard_.world_rank(shard_.pp_size - 1, 0);
  if (shard_.leader()) {
    logits.resize(size);
    if (size > 0) shard_.world->receive(logits.data(), size * sizeof(float), last, kLogitsTag);
  } else if (shard_.world->rank() == last && size > 0) {
    shard_.world->send(logits.data(), size * sizeof(float), 0, kLogitsTag);
  }
}

Status DecoderModel::forward(std::span<const TokenIndex> tokens, int start_position,
                             KvCache& cache, ThreadPool& pool, int num_logits,
                             std::vector<float>& logits, int position_offset,
                             const AttentionObserver* observer, std::vector<float>* final_hidden) {
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
  if (shard_.distributed()) {
    if (observer != nullptr || final_hidden != nullptr) {
      return unsupported("SnapKV and MTP run in one process");
    }
    if (shard_.leader()) {
      ShardCall call;
      call.kind = ShardCall::Kind::kForward;
      call.cache_id = reinterpret_cast<uintptr_t>(&cache);
      call.cache_type = cache.type();
      call.capacity = cache.capacity();
      call.start_position = start_position;
      call.num_logits = num_logits;
      call.position_offset = position_offset;
      call.tokens.assign(tokens.begin(), tokens.end());
      send_shard_call(*shard_.world, call);
    }
  }

  // Pipeline parallelism: a long prompt in pieces flowing through the stages (each stage splits
  // it alike); one piece otherwise.
  const std::vector<int> cuts = even_token_cuts(num_tokens, shard_.pp_size);
  // MLA's path, chosen for the whole call (its pieces alike).
  const bool decompressed = config_.mla.enabled() && observer == nullptr &&
                            decompresses(start_position, num_tokens);
  const int first_logit = num_tokens - num_logits;
  const int64_t kv_size = local_kv_size();
  std::vector<float> all_logits;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int begin = cuts[k];
    const int count = cuts[k + 1] - begin;
    const int piece_start = start_position + begin;
    std::vector<int>& positions = workspace_.positions;
    positions.resize(count);
    for (int t = 0; t < count; ++t) positions[t] = piece_start + t + position_offset;
    auto store = [&](int layer, int first, int end) {
      const int64_t offset = first * kv_size;
      cache.store(cache_layer(layer), piece_start + first, end - first,
                  workspace_.key.data() + offset, workspace_.value.data() + offset);
    };
    auto prefetch_store = [&](int layer) {
      cache.prefetch_store(cache_layer(layer), piece_start, count);
    };
    workspace_.latent_runs.clear();
    if (decompressed) workspace_.latent_runs.push_back({0, count, piece_start, 0});
    // This piece's keys and values are in the cache: every query attends over it.
    Status layers = run_layers(tokens.subspan(begin, count), store, prefetch_store, [&](int layer) {
      Workspace& w = workspace_;
      const AttentionShape shape = attention_shape(layer);
      if (decompressed) {
        const int positions = piece_start + count;
        w.run_latents.resize(1);
        w.run_latents[0].resize(static_cast<size_t>(positions) * shape.head_size);
        w.head_output.resize(static_cast<size_t>(positions) * shape.head_size);  // scratch
        cache.load_head(cache_layer(layer), 0, shape.head_size, positions,
                        w.run_latents[0].data(), w.head_output.data());
      } else if (numerics_ == Numerics::kLlamaCpp) {
        causal_attention_llamacpp(shape, w.query.data(), count, piece_start, cache,
                                  cache_layer(layer), w.attention.data(), pool);
      } else {
        causal_attention(shape, w.query.data(), count, piece_start, cache, cache_layer(layer),
                         w.attention.data(), pool);
      }
      if (observer != nullptr) (*observer)(layer, w.query.data(), count);
    }, pool);
    TACHYON_RETURN_IF_ERROR(layers);
    // (SnapKV and MTP run in one process, in one piece.)
    if (final_hidden != nullptr) normalize_final(count, pool, *final_hidden);
    std::vector<int> rows;
    for (int t = std::max(begin, first_logit); t < begin + count; ++t) rows.push_back(t - begin);
    if (cuts.size() == 2) {
      output_logits(rows, logits, pool);
      return Status();
    }
    if (shard_.last_stage()) {
      project_logits(rows, weights_.output_norm, weights_.output, logits, pool);
      all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    }
  }
  logits = std::move(all_logits);
  receive_logits(num_logits, logits);
  return Status();
}

void DecoderModel::output_logits(std::span<const int> rows, std::vector<float>& logits,
                                 ThreadPool& pool) {
  if (shard_.last_stage()) {
    project_logits(rows, weights_.output_norm, weights_.output, logits, pool);
  }
  if (shard_.pp_size > 1) receive_logits(static_cast<int>(rows.size()), logits);
}

void DecoderModel::normalize_final(int num_tokens, ThreadPool& pool, std::vector<float>& out) {
  const int hidden = config_.hidden_size;
  out.resize(static_cast<size_t>(num_tokens) * hidden);
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    for (int t = first; t < end; ++t) {
      normalize(workspace_.residual.data() + static_cast<int64_t>(t) * hidden,
                weights_.output_norm, hidden, out.data() + static_cast<int64_t>(t) * hidden);
    }
  });
}

Status DecoderModel::check_batch(const ForwardBatch& batch, const PagedKvCache& cache) const {
  const int num_tokens = batch.num_tokens();
  if (num_tokens == 0) return invalid_argument("forward needs at least one token");
  if (static_cast<int>(batch.positions.size()) != num_tokens ||
      static_cast<int>(batch.slots.size()) != num_tokens || batch.block_size != cache.block_size() ||
      (cache.has_local_layers() && static_cast<int>(batch.local_slots.size()) != num_tokens)) {
    return invalid_argument("inconsistent forward batch");
  }
  for (int32_t token : batch.tokens) {
    if (token < 0 || token >= config_.vocab_size) {
      return invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", token,
                                          config_.vocab_size - 1));
    }
  }
  return Status();
}

Status DecoderModel::forward_batch(const ForwardBatch& batch, PagedKvCache& cache,
                                   ThreadPool& pool, std::vector<float>& logits,
                                   const AttentionObserver* observer,
                                   std::vector<float>* final_hidden) {
  TACHYON_RETURN_IF_ERROR(check_batch(batch, cache));
  if (shard_.distributed()) {
    if (observer != nullptr || final_hidden != nullptr) {
      return unsupported("SnapKV and MTP run in one process");
    }
    if (shard_.leader()) {
      ShardCall call;
      call.kind = ShardCall::Kind::kForwardBatch;
      call.cache_id = reinterpret_cast<uintptr_t>(&cache);
      call.cache_type = cache.type();
      call.capacity = cache.num_blocks();
      call.num_local_blocks = cache.num_local_blocks();
      call.batch = batch;
      send_shard_call(*shard_.world, call);
    }
  }
  for (const BlockCopy& copy : batch.block_copies) {
    cache.copy_block(copy.from, copy.to, copy.local);
  }
  for (const KeyShift& shift : batch.key_shifts) {
    cache.rewrite_keys(shift.block, shift.count, shift.local, [&](float* keys, int n, int layer) {
      shift_keys(keys, n, shift.delta, layer);
    });
  }
  if (shard_.pp_size > 1) {
    std::vector<int> cuts = micro_batch_cuts(batch);
    if (cuts.size() > 2) return forward_micro_batches(batch, cuts, cache, pool, logits);
  }
  TACHYON_RETURN_IF_ERROR(run_batch_layers(batch, cache, pool, observer));
  if (final_hidden != nullptr) normalize_final(batch.num_tokens(), pool, *final_hidden);
  output_logits(batch.logits_tokens, logits, pool);
  return Status();
}

std::vector<int> DecoderModel::micro_batch_cuts(const ForwardBatch& batch) const {
  // Enough tokens (prompt chunks, compute-bound): even_token_cuts, a prompt chunk cut in
  // pieces too. Fewer (decodes, memory-bound: each micro-batch reads the stage's weights
  // again): whole sequences, one part per stage.
  const int num_tokens = batch.num_tokens();
  const int stages = shard_.pp_size;
  std::vector<int> cuts = even_token_cuts(num_tokens, stages);
  if (cuts.size() > 2) return cuts;
  cuts = {0};
  const int count = static_cast<int>(batch.sequences.size());
  const int parts = std::min(stages, count);
  int tokens = 0;
  for (int s = 0; s + 1 < count && static_cast<int>(cuts.size()) < parts; ++s) {
    tokens += batch.sequences[s].num_tokens;
    const int part = static_cast<int>(cuts.size());
    if (static_cast<int64_t>(tokens) * parts >= static_cast<int64_t>(num_tokens) * part ||
        count - (s + 1) == parts - part) {
      cuts.push_back(tokens);
    }
  }
  cuts.push_back(num_tokens);
  return cuts;
}

Status DecoderModel::forward_micro_batches(const ForwardBatch& batch, std::span<const int> cuts,
                                           PagedKvCache& cache, ThreadPool& pool,
                                           std::vector<float>& logits) {
  // A token's result depends only on its own sequence's earlier tokens, so the logits are those
  // of one pass.
  std::vector<float> all_logits;
  // MLA's path per sequence, chosen for its whole run (each piece of it alike).
  std::vector<char> decompressed;
  for (const BatchSequence& sequence : batch.sequences) {
    decompressed.push_back(config_.mla.enabled() &&
                           decompresses(sequence.start_position, sequence.num_tokens));
  }
  std::vector<char> piece_decompressed;
  size_t next_sequence = 0;  // the first sequence with tokens at or after `begin`
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int begin = cuts[k];
    const int end = cuts[k + 1];
    ForwardBatch& micro = micro_batch_;
    micro.clear();
    micro.block_size = batch.block_size;
    piece_decompressed.clear();
    auto slice = [&](const auto& from, auto& to) {
      if (!from.empty()) to.assign(from.begin() + begin, from.begin() + end);
    };
    slice(batch.tokens, micro.tokens);
    slice(batch.positions, micro.positions);
    slice(batch.slots, micro.slots);
    slice(batch.local_slots, micro.local_slots);
    // Each sequence's tokens inside [begin, end): a piece of it starts later in the sequence.
    for (size_t s = next_sequence; s < batch.sequences.size(); ++s) {
      const BatchSequence& sequence = batch.sequences[s];
      const int first = std::max(begin, sequence.first_token);
      const int last = std::min(end, sequence.first_token + sequence.num_tokens);
      if (sequence.first_token >= end) break;
      if (last <= first) continue;
      BatchSequence piece = sequence;
      piece_decompressed.push_back(decompressed[s]);
      piece.first_token = first - begin;
      piece.num_tokens = last - first;
      piece.start_position = sequence.start_position + (first - sequence.first_token);
      micro.sequences.push_back(std::move(piece));
      if (last == sequence.first_token + sequence.num_tokens) next_sequence = s + 1;
    }
    for (int t : batch.logits_tokens) {
      if (t >= begin && t < end) micro.logits_tokens.push_back(t - begin);
    }
    TACHYON_RETURN_IF_ERROR(run_batch_layers(micro, cache, pool, nullptr, piece_decompressed));
    if (shard_.last_stage()) {
      project_logits(micro.logits_tokens, weights_.output_norm, weights_.output, logits, pool);
      all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    }
  }
  logits = std::move(all_logits);
  receive_logits(static_cast<int>(batch.logits_tokens.size()), logits);
  return Status();
}

Status DecoderModel::run_batch_layers(const ForwardBatch& batch, PagedKvCache& cache,
                                      ThreadPool& pool, const AttentionObserver* observer,
                                      std::span<const char> decompressed) {
  workspace_.positions = batch.positions;
  // MLA: the runs taking the decompressed path, and a batch of the others for paged attention.
  std::vector<Workspace::LatentRun>& latent_runs = workspace_.latent_runs;
  latent_runs.clear();
  const ForwardBatch* absorbed = &batch;
  if (config_.mla.enabled() && observer == nullptr && mla_attention_ != MlaAttention::kAbsorbed) {
    absorbed_batch_.clear();
    absorbed_batch_.block_size = batch.block_size;
    for (int s = 0; s < static_cast<int>(batch.sequences.size()); ++s) {
      const BatchSequence& sequence = batch.sequences[s];
      if (decompressed.empty() ? decompresses(sequence.start_position, sequence.num_tokens)
                               : decompressed[s] != 0) {
        latent_runs.push_back(
            {sequence.first_token, sequence.num_tokens, sequence.start_position, s});
      } else {
        absorbed_batch_.sequences.push_back(sequence);
      }
    }
    if (!latent_runs.empty()) absorbed = &absorbed_batch_;
  }
  const int64_t kv_size = local_kv_size();
  // Sliding-window layers store in their own blocks (PagedKvCache::is_local).
  auto slots = [&](int layer) -> const std::vector<int64_t>& {
    return cache.is_local(cache_layer(layer)) ? batch.local_slots : batch.slots;
  };
  auto store = [&](int layer, int first, int end) {
    const int64_t offset = first * kv_size;
    cache.store(cache_layer(layer),
                std::span<const int64_t>(slots(layer)).subspan(first, end - first),
                workspace_.key.data() + offset, workspace_.value.data() + offset);
  };
  auto prefetch_store = [&](int layer) {
    cache.prefetch_store(cache_layer(layer), slots(layer));
  };
  TACHYON_RETURN_IF_ERROR(run_layers(batch.tokens, store, prefetch_store, [&](int layer) {
    Workspace& w = workspace_;
    const AttentionShape shape = attention_shape(layer);
    if (!absorbed->sequences.empty()) {
      paged_attention(shape, w.query.data(), *absorbed, cache, cache_layer(layer),
                      w.attention.data(), pool);
    }
    w.run_latents.resize(latent_runs.size());
    for (size_t r = 0; r < latent_runs.size(); ++r) {
      // The run's latents block by block (the cache's values are its keys, back in rows).
      const BatchSequence& sequence = batch.sequences[latent_runs[r].sequence];
      const int positions = sequence.start_position + sequence.num_tokens;
      const int block_size = batch.block_size;
      AlignedVector<float>& rows = w.run_latents[r];
      rows.resize(static_cast<size_t>(positions) * shape.head_size);
      w.head_output.resize(static_cast<size_t>(shape.head_size) * block_size);  // scratch
      for (int p = 0; p < positions; p += block_size) {
        cache.load_block(cache_layer(layer), 0, sequence.block_table[p / block_size],
                         std::min(block_size, positions - p), w.head_output.data(), block_size,
                         rows.data() + static_cast<int64_t>(p) * shape.head_size);
      }
    }
    if (observer != nullptr) (*observer)(layer, w.query.data(), batch.num_tokens());
  }, pool));
  return Status();
}

Result<std::unique_ptr<PagedKvCache>> DecoderModel::make_paged_cache(int num_blocks,
                                                                     int block_size, DType type,
                                                                     int num_local_blocks) const {
  std::vector<bool> local_layers;
  if (num_local_blocks > 0 && config_.has_local_layers()) {
    local_layers.assign(config_.local_layers.begin() + shard_.first_layer,
                        config_.local_layers.begin() + shard_.end_layer);
  }
  return PagedKvCache::create(shard_.num_layers(), attention_shape().num_kv_heads,
                              config_.head_size, num_blocks, block_size, type,
                              config_.kv_values_are_keys(), std::move(local_layers),
                              num_local_blocks);
}

Result<std::unique_ptr<PagedKvCache>> DecoderModel::make_mtp_cache(int num_blocks, int block_size,
                                                                   DType type) const {
  if (config_.num_mtp_layers == 0) return invalid_argument("the model has no MTP layer");
  return PagedKvCache::create(config_.num_mtp_layers, config_.num_kv_heads, config_.head_size,
                              num_blocks, block_size, type, config_.kv_values_are_keys());
}

Status DecoderModel::forward_mtp_batch(int mtp, const ForwardBatch& batch,
                                       const float* trunk_hidden, PagedKvCache& cache,
                                       ThreadPool& pool, std::vector<float>& logits,
                                       std::vector<float>* mtp_hidden) {
  if (mtp < 0 || mtp >= static_cast<int>(weights_.mtp_layers.size())) {
    return invalid_argument(fmt::format("MTP layer {} of {}", mtp, weights_.mtp_layers.size()));
  }
  TACHYON_RETURN_IF_ERROR(check_batch(batch, cache));
  const MtpLayerWeights& weights = weights_.mtp_layers[static_cast<size_t>(mtp)];
  const int num_tokens = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  Workspace& w = workspace_;
  w.positions = batch.positions;
  w.latent_runs.clear();  // MTP proposes a token or a few: absorbed
  prepare_workspace(num_tokens);
  // The layer's input: eh_proj · [enorm(embedding), hnorm(trunk hidden)], into the residual.
  w.mtp_input.resize(static_cast<size_t>(num_tokens) * 2 * hidden);
  embed(weights.embedding, batch.tokens, w.normed.data());
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    for (int t = first; t < end; ++t) {
      float* row = w.mtp_input.data() + static_cast<int64_t>(t) * 2 * hidden;
      normalize(w.normed.data() + t * hidden, weights.enorm, static_cast<int>(hidden), row);
      normalize(trunk_hidden + t * hidden, weights.hnorm, static_cast<int>(hidden), row + hidden);
    }
  });
  const kernels::MatmulProduct projection[] = {{&weights.eh_proj, w.residual.data()}};
  multiply(projection, w.mtp_input.data(), num_tokens, pool);

  const int64_t kv_size = config_.kv_size();
  auto store = [&](int layer, int first, int end) {
    cache.store(layer, std::span<const int64_t>(batch.slots).subspan(first, end - first),
                w.key.data() + first * kv_size, w.value.data() + first * kv_size);
  };
  auto prefetch_store = [&](int layer) { cache.prefetch_store(layer, batch.slots); };
  auto attend = [&](int layer) {
    paged_attention(attention_shape(), w.query.data(), batch, cache, layer, w.attention.data(),
                    pool);
  };
  try {
    run_layer(weights.layer, mtp, num_tokens, /*add_projected=*/false, store, prefetch_store,
              attend, pool);
  } catch (const ModelReadError& error) {
    return io_error(error.what());
  }
  add_residual(num_tokens, pool);
  if (mtp_hidden != nullptr) {
    mtp_hidden->resize(batch.logits_tokens.size() * static_cast<size_t>(hidden));
    for (size_t i = 0; i < batch.logits_tokens.size(); ++i) {
      std::copy_n(w.residual.data() + batch.logits_tokens[i] * hidden, hidden,
                  mtp_hidden->data() + i * hidden);
    }
  }
  project_logits(batch.logits_tokens, weights.head_norm, weights.head, logits, pool);
  return Status();
}

AttentionShape DecoderModel::attention_shape() const {
  if (config_.mla.enabled()) {
    // Scores are q·k over the nope and rope dimensions of each head, however computed.
    const LatentAttentionConfig& mla = config_.mla;
    double scale = 1.0 / std::sqrt(static_cast<double>(mla.qk_head_dim()));
    const double factor = config_.rope.scaling_factor;
    if (config_.rope.scaling == RopeScaling::kYarn && mla.softmax_mscale != 0 && factor > 1) {
      const double m = 0.1 * mla.softmax_mscale * std::log(factor) + 1.0;
      scale *= m * m;
    }
    return AttentionShape{shard_.local_heads(), 1, mla.latent_size(), static_cast<float>(scale)};
  }
  const int scale_dim =
      config_.attention_scale_dim > 0 ? config_.attention_scale_dim : config_.head_size;
  const int kv_heads = shard_.local_kv_heads();
  return AttentionShape{kv_heads * (config_.num_heads / config_.num_kv_heads), kv_heads,
                        config_.head_size, 1.0f / std::sqrt(static_cast<float>(scale_dim))};
}

AttentionShape DecoderModel::attention_shape(int layer) const {
  AttentionShape shape = attention_shape();
  if (config_.layer_is_local(layer)) shape.window = config_.sliding_window;
  return shape;
}

Status DecoderModel::run_layers(std::span<const TokenIndex> tokens, StoreTokens store,
                                PrefetchStore prefetch_store, Attend attend, ThreadPool& pool) {
  const int num_tokens = static_cast<int>(tokens.size());
  prepare_workspace(num_tokens);
  // A pipeline stage after the first takes the residual stream from the stage before (each TP
  // rank from its counterpart there) and hands its own on to the next.
  const size_t residual_bytes =
      static_cast<size_t>(num_tokens) * config_.hidden_size * sizeof(float);
  if (shard_.first_stage()) {
    embed(weights_.token_embedding, tokens, workspace_.residual.data());
  } else {
    shard_.world->receive(workspace_.residual.data(), residual_bytes,
                          shard_.world_rank(shard_.pp_stage - 1, shard_.tp_rank), kResidualTag);
  }
  try {
    for (int i = shard_.first_layer; i < shard_.end_layer; ++i) {
      run_layer(weights_.layers[i], i, num_tokens, i > shard_.first_layer, store, prefetch_store,
                attend, pool);
    }
  } catch (const ModelReadError& error) {
    return io_error(error.what());  // an expert the file could not give (--experts-mem)
  }
  add_residual(num_tokens, pool);  // the last feed-forward block's output
  if (!shard_.last_stage()) {
    shard_.world->send(workspace_.residual.data(), residual_bytes,
                       shard_.world_rank(shard_.pp_stage + 1, shard_.tp_rank), kResidualTag);
  }
  return Status();
}

void DecoderModel::run_layer(const LayerWeights& layer, int layer_index, int num_tokens,
                             bool add_projected, StoreTokens store, PrefetchStore prefetch_store,
                             Attend attend, ThreadPool& pool) {
  if (config_.mla.enabled()) {
    latent_attention_block(layer, layer_index, num_tokens, add_projected, store, attend, pool);
  } else {
    attention_block(layer, layer_index, num_tokens, add_projected, store, prefetch_store, attend,
                    pool);
  }
  if (layer.has_experts) {
    expert_feed_forward_block(layer, num_tokens, pool);
  } else {
    feed_forward_block(layer, num_tokens, pool);
  }
}

void DecoderModel::prepare_workspace(int num_tokens) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  w.residual.resize(num_tokens * hidden);
  w.normed.resize(num_tokens * hidden);
  // A tensor-parallel shard's own heads (config_.q_size() and kv_size() otherwise).
  const int64_t q_size = config_.mla.enabled() ? config_.q_size() : query_rows_.count(shard_.tp_rank);
  const int64_t kv_size = local_kv_size();
  w.query.resize(static_cast<int64_t>(num_tokens) * q_size);
  w.key.resize(static_cast<int64_t>(num_tokens) * kv_size);
  w.value.resize(static_cast<int64_t>(num_tokens) * kv_size);
  w.attention.resize(static_cast<int64_t>(num_tokens) * q_size);
  w.projected.resize(num_tokens * hidden);
  if (shard_.tp_size > 1) {
    w.partial.resize(num_tokens * std::max(hidden, shard_.vocab_rows.count(shard_.tp_rank)));
    w.gathered.resize(num_tokens * std::max<int64_t>(config_.q_size(), config_.ffn_size));
  }
  const MixtureOfExpertsConfig& moe = config_.moe;
  // Per token: the dense FFN's or shared experts' rows, or every chosen expert's.
  const int64_t ffn = std::max({static_cast<int64_t>(config_.ffn_size),
                                static_cast<int64_t>(moe.shared_ffn_size),
                                static_cast<int64_t>(moe.expert_ffn_size) * moe.experts_per_token});
  w.gate.resize(num_tokens * ffn);
  w.up.resize(num_tokens * ffn);
  if (config_.mla.enabled()) {
    const LatentAttentionConfig& mla = config_.mla;
    w.query_a.resize(static_cast<int64_t>(num_tokens) * mla.q_lora_rank);
    w.query_heads.resize(static_cast<int64_t>(num_tokens) * config_.num_heads * mla.qk_head_dim());
    w.latent.resize(static_cast<int64_t>(num_tokens) * mla.latent_size());
    w.head_input.resize(static_cast<int64_t>(num_tokens) *
                        std::max(mla.qk_nope_head_dim, mla.kv_lora_rank));
    w.head_output.resize(static_cast<int64_t>(num_tokens) *
                         std::max(mla.kv_lora_rank, mla.v_head_dim));
    w.head_values.resize(static_cast<int64_t>(num_tokens) * config_.num_heads * mla.v_head_dim);
  }
  if (moe.enabled()) {
    w.router_logits.resize(static_cast<int64_t>(num_tokens) * moe.num_experts);
    w.chosen_experts.resize(static_cast<size_t>(num_tokens) * moe.experts_per_token);
    w.expert_weights.resize(static_cast<size_t>(num_tokens) * moe.experts_per_token);
    w.expert_input.resize(num_tokens * moe.experts_per_token * hidden);
    w.expert_output.resize(num_tokens * moe.experts_per_token * hidden);
  }
  rope_.compute_angles(w.positions, w.rope_cos, w.rope_sin);
  if (config_.has_local_layers()) {
    local_rope_.compute_angles(w.positions, w.local_rope_cos, w.local_rope_sin);
  }
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

void DecoderModel::project_logits(std::span<const int> rows, const float* norm_weight,
                                  const kernels::WeightMatrix& output_matrix,
                                  std::vector<float>& logits, ThreadPool& pool) {
  // Final norm and the output projection, only for the tokens whose logits are wanted.
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  const int count = static_cast<int>(rows.size());
  // Tensor parallelism: each rank its vocabulary rows, collected on the stage's first rank.
  const bool split = output_matrix.rows != config_.vocab_size;
  if (!split || shard_.tp_rank == 0) logits.resize(static_cast<size_t>(count) * config_.vocab_size);
  if (count == 0) return;
  float* products = split ? w.partial.data() : logits.data();
  const kernels::MatmulProduct output[] = {{&output_matrix, products}};
  kernels::MatmulInput* input = nullptr;
  if (numerics_ == Numerics::kNative) {
    input = &w.normed_input;
    input->prepare(kernels::active_kernel_level(), output, w.normed.data(), count);
  }
  for (int i = 0; i < count; ++i) {
    normalize(w.residual.data() + rows[i] * hidden, norm_weight, static_cast<int>(hidden),
              w.normed.data() + i * hidden);
    if (input != nullptr) input->quantize_rows(i, i + 1);
  }
  multiply_normed(output, count, pool);
  if (split) gather_columns_to_first(products, count, shard_.vocab_rows, logits.data());
}

void DecoderModel::attention_block(const LayerWeights& layer, int layer_index, int num_tokens,
                                   bool add_projected, StoreTokens store,
                                   PrefetchStore prefetch_store, Attend attend, ThreadPool& pool) {
  Workspace& w = workspace_;
  const int head_size = config_.head_size;
  // This TP rank's heads (all of them in one process).
  const AttentionShape heads = attention_shape();
  const int64_t q_size = static_cast<int64_t>(heads.num_heads) * head_size;
  const int64_t kv_size = static_cast<int64_t>(heads.num_kv_heads) * head_size;
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
  const bool local = config_.layer_is_local(layer_index);
  const std::vector<float>& rope_cos = local ? w.local_rope_cos : w.rope_cos;
  const std::vector<float>& rope_sin = local ? w.local_rope_sin : w.rope_sin;
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
        for (int h = 0; h < heads.num_heads; ++h) {
          float* head = query + static_cast<int64_t>(h) * head_size;
          normalize(head, layer.query_norm, head_size, head);
        }
        for (int h = 0; h < heads.num_kv_heads; ++h) {
          float* head = key + static_cast<int64_t>(h) * head_size;
          normalize(head, layer.key_norm, head_size, head);
        }
      }
      const float* cos_row = rope_cos.data() + static_cast<int64_t>(t) * pairs;
      const float* sin_row = rope_sin.data() + static_cast<int64_t>(t) * pairs;
      rotate(query, heads.num_heads, cos_row, sin_row);
      rotate(key, heads.num_kv_heads, cos_row, sin_row);
      store(layer_index, t, t + 1);
    }
  });

  attend(layer_index);

  project_to_hidden(layer.attention_output, w.attention.data(), query_rows_, num_tokens, pool);
  if (layer.post_attention_norm != nullptr) {
    normalize_projected(layer.post_attention_norm, num_tokens, pool);
  }
}

void DecoderModel::project_to_hidden(const kernels::WeightMatrix& weight, const float* local,
                                     const RowSplit& split, int num_tokens, ThreadPool& pool) {
  Workspace& w = workspace_;
  if (shard_.tp_size > 1) {
    // Every rank's columns of the input, then this rank's rows of the product, then all rows.
    const kernels::MatmulProduct product[] = {{&weight, w.partial.data()}};
    if (gather_quantized_input(product[0], local, split, num_tokens, pool)) {
      kernels::matmul_many(product, w.gathered_input, pool);
    } else {
      gather_columns(local, num_tokens, split, w.gathered.data());
      multiply(product, w.gathered.data(), num_tokens, pool);
    }
    gather_columns(w.partial.data(), num_tokens, shard_.hidden_rows, w.projected.data());
  } else {
    const kernels::MatmulProduct product[] = {{&weight, w.projected.data()}};
    multiply(product, local, num_tokens, pool);
  }
}

void DecoderModel::normalize_projected(const float* weight, int num_tokens, ThreadPool& pool) {
  const int64_t hidden = config_.hidden_size;
  for_token_ranges(num_tokens, pool, [&](int first, int end) {
    for (int t = first; t < end; ++t) {
      float* row = workspace_.projected.data() + t * hidden;
      normalize(row, weight, static_cast<int>(hidden), row);
    }
  });
}

void DecoderModel::swiglu_rows(int64_t ffn, int num_tokens, int64_t begin, int64_t end) {
  Workspace& w = workspace_;
  for (int t = 0; t < num_tokens; ++t) {
    float* gate = w.gate.data() + t * ffn + begin;
    if (config_.ffn_activation == FeedForwardActivation::kGeluTanh) {
      kernels::geglu(gate, w.up.data() + t * ffn + begin, end - begin, gate);
    } else {
      swiglu(gate, w.up.data() + t * ffn + begin, end - begin, gate);
    }
  }
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
  const int64_t ffn_size = layer.gate.rows;  // this TP rank's rows (all in one process)
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
    auto rows = [&](int64_t begin, int64_t end) { swiglu_rows(ffn_size, num_tokens, begin, end); };
    const kernels::RowEpilogue epilogue(rows);
    multiply_normed(gate_up, num_tokens, pool, &epilogue);
  }
  project_to_hidden(layer.down, w.gate.data(), shard_.ffn_rows, num_tokens, pool);
  if (layer.post_ffn_norm != nullptr) normalize_projected(layer.post_ffn_norm, num_tokens, pool);
}

void DecoderModel::expert_feed_forward_block(const LayerWeights& layer, int num_tokens,
                                             ThreadPool& pool) {
  Workspace& w = workspace_;
  const ExpertWeights& experts = layer.experts;
  const MixtureOfExpertsConfig& moe = config_.moe;
  const int64_t hidden = config_.hidden_size;
  const int k = moe.experts_per_token;
  const bool shared = moe.shared_ffn_size > 0;
  // The router's logits and, for every token, the shared experts (SwiGLU as the products'
  // epilogue, as in feed_forward_block).
  const kernels::MatmulProduct all_consumers[] = {{&experts.router, w.router_logits.data()},
                                                   {&experts.shared_gate, w.gate.data()},
                                                   {&experts.shared_up, w.up.data()}};
  const std::span<const kernels::MatmulProduct> consumers(all_consumers, shared ? 3 : 1);
  add_and_normalize(layer.ffn_norm, true, consumers, num_tokens, pool);
  multiply_normed(consumers.first(1), num_tokens, pool);
  // Each token's experts, then the tokens grouped per expert, in token order.
  const ExpertRouter router(moe);
  for_token_ranges(num_tokens, pool, [&](int begin, int end) {
    for (int t = begin; t < end; ++t) {
      router.route(w.router_logits.data() + static_cast<int64_t>(t) * moe.num_experts,
                   experts.selection_bias, w.chosen_experts.data() + t * k,
                   w.expert_weights.data() + t * k);
    }
  });
  w.expert_offsets.assign(moe.num_experts + 1, 0);
  for (int i = 0; i < num_tokens * k; ++i) ++w.expert_offsets[w.chosen_experts[i] + 1];
  for (int e = 0; e < moe.num_experts; ++e) w.expert_offsets[e + 1] += w.expert_offsets[e];
  w.expert_tokens.resize(static_cast<size_t>(num_tokens) * k);
  w.expert_token_weights.resize(static_cast<size_t>(num_tokens) * k);
  w.expert_next.assign(w.expert_offsets.begin(), w.expert_offsets.end() - 1);
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < k; ++i) {
      const int slot = w.expert_next[w.chosen_experts[t * k + i]]++;
      w.expert_tokens[slot] = t;
      w.expert_token_weights[slot] = w.expert_weights[t * k + i];
    }
  }
  // The chosen experts, ascending, and how many tokens chose each.
  w.step_experts.clear();
  w.step_slots.clear();
  for (int e = 0; e < moe.num_experts; ++e) {
    const int count = w.expert_offsets[e + 1] - w.expert_offsets[e];
    if (count == 0) continue;
    w.step_experts.push_back(e);
    w.step_slots.push_back({e, w.expert_offsets[e], w.expert_offsets[e + 1]});
    expert_load_.add(experts.model_layer, e, static_cast<uint64_t>(count));
  }
  // --experts-mem: the file starts reading this layer's missing experts and the next layer's
  // likely ones while the shared experts compute.
  ExpertCache* cache = weights_.expert_cache.get();
  if (cache != nullptr) {
    cache->prefetch(experts.cache_layer, w.step_experts);
    prefetch_next_experts(experts, num_tokens, pool);
  }
  if (shared) {
    auto rows = [&](int64_t begin, int64_t end) {
      swiglu_rows(moe.shared_ffn_size, num_tokens, begin, end);
    };
    const kernels::RowEpilogue epilogue(rows);
    multiply_normed(consumers.subspan(1), num_tokens, pool, &epilogue);
    kernels::matmul(experts.shared_down, w.gate.data(), num_tokens, w.projected.data(), pool);
    if (moe.shared_expert_gated) {
      // Qwen2-MoE: each token's shared expert output times sigmoid(normed · gate).
      for_token_ranges(num_tokens, pool, [&](int begin, int end) {
        for (int t = begin; t < end; ++t) {
          const float* x = w.normed.data() + t * hidden;
          float dot = 0.0f;
          for (int64_t c = 0; c < hidden; ++c) dot += x[c] * experts.shared_gate_vector[c];
          const float gate = 1.0f / (1.0f + std::exp(-dot));
          float* out = w.projected.data() + t * hidden;
          for (int64_t c = 0; c < hidden; ++c) out[c] *= gate;
        }
      });
    }
  } else {
    std::fill_n(w.projected.begin(), num_tokens * hidden, 0.0f);
  }
  if (cache != nullptr) {
    cache->acquire(experts.cache_layer, w.step_experts, w.resident_experts, pool);
  }
  if (shard_.tp_size > 1) {
    run_experts_over_ranks(experts, num_tokens, pool);
    return;
  }
  run_chosen_experts(experts, w.step_slots, num_tokens, pool);
  add_expert_outputs(0, num_tokens);
}

void DecoderModel::add_expert_outputs(int token_begin, int token_end) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  // Expert by expert in id order, so each token sums its experts in the same order whatever
  // else is in the batch (the products give a row the same bits alone or among others).
  for (const int e : w.step_experts) {
    for (int slot = w.expert_offsets[e]; slot < w.expert_offsets[e + 1]; ++slot) {
      const int token = w.expert_tokens[slot];
      if (token < token_begin || token >= token_end) continue;
      const float weight = w.expert_token_weights[slot];
      float* out = w.projected.data() + static_cast<int64_t>(token) * hidden;
      const float* y = w.expert_output.data() + slot * hidden;
      for (int64_t c = 0; c < hidden; ++c) out[c] += weight * y[c];
    }
  }
}

void DecoderModel::run_experts_over_ranks(const ExpertWeights& experts, int num_tokens,
                                          ThreadPool& pool) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  const int layer = experts.model_layer;
  // Each step expert's pairs in as many consecutive chunks as it has owners, the i-th chunk to
  // the i-th owner; every rank works out every rank's share the same way.
  w.rank_slots.clear();
  for (const ExpertSlots& slots : w.step_slots) {
    const std::vector<int>& owners = shard_.expert_placement->owners(layer, slots.expert);
    const int count = slots.end - slots.first;
    const int parts = static_cast<int>(owners.size());
    for (int i = 0; i < parts; ++i) {
      const int first = slots.first + count * i / parts;
      const int end = slots.first + count * (i + 1) / parts;
      if (end > first) w.rank_slots.push_back({owners[i], {slots.expert, first, end}});
    }
  }
  std::stable_sort(w.rank_slots.begin(), w.rank_slots.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  w.own_slots.clear();
  std::vector<int> counts(shard_.tp_size, 0), offsets(shard_.tp_size, 0);
  for (const auto& [rank, slots] : w.rank_slots) {
    if (rank == shard_.tp_rank) w.own_slots.push_back(slots);
    counts[rank] += static_cast<int>((slots.end - slots.first) * hidden);
  }
  for (int r = 1; r < shard_.tp_size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  run_chosen_experts(experts, w.own_slots, num_tokens, pool);
  if (exchange_to_token_owners(num_tokens)) {
    send_expert_rows_to_token_owners(num_tokens);
    return;
  }
  gather_expert_rows(counts, offsets);
  add_expert_outputs(0, num_tokens);
}

bool DecoderModel::exchange_to_token_owners(int num_tokens) const {
  switch (shard_.expert_exchange) {
    case ExpertExchange::kAllGather: return false;
    case ExpertExchange::kAllToAll: return true;
    case ExpertExchange::kAuto: break;
  }
  // The all-gather brings each rank the other ranks' pairs' rows in one collective; the
  // all-to-all about 1/N of those, then the other ranks' token sums, in two. It is worth its
  // second collective's latency only when it saves enough bytes.
  const double ranks = shard_.tp_size;
  const double row_bytes = static_cast<double>(config_.hidden_size) * sizeof(float);
  const double pairs = static_cast<double>(workspace_.expert_tokens.size());
  const double gathered = pairs * row_bytes * (ranks - 1) / ranks;
  const double exchanged = gathered / ranks + num_tokens * row_bytes * (ranks - 1) / ranks;
  return gathered - exchanged >= kAllToAllMinSavedBytes;
}

void DecoderModel::gather_expert_rows(std::span<const int> counts, std::span<const int> offsets) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  // When the ranks' shares are consecutive slots in rank order (consecutive ids, no copies),
  // the rows are gathered where they belong.
  bool in_slot_order = true;
  int next_slot = 0;
  for (const auto& [rank, slots] : w.rank_slots) {
    in_slot_order = in_slot_order && slots.first == next_slot;
    next_slot = slots.end;
  }
  if (in_slot_order) {
    shard_.tensor_group->all_gather(w.expert_output.data() + offsets[shard_.tp_rank], counts,
                                    offsets, w.expert_output.data());
    return;
  }
  // Else this rank's rows in its order, every rank's gathered, then each row back to its slot.
  // Where a pair was computed does not change its bits.
  w.expert_exchange.resize(static_cast<size_t>(offsets.back() + counts.back()));
  float* mine = w.expert_exchange.data() + offsets[shard_.tp_rank];
  for (const ExpertSlots& slots : w.own_slots) {
    const size_t floats = static_cast<size_t>(slots.end - slots.first) * hidden;
    std::copy_n(w.expert_output.data() + slots.first * hidden, floats, mine);
    mine += floats;
  }
  shard_.tensor_group->all_gather(w.expert_exchange.data() + offsets[shard_.tp_rank], counts,
                                  offsets, w.expert_exchange.data());
  const float* row = w.expert_exchange.data();
  for (const auto& [rank, slots] : w.rank_slots) {
    const size_t floats = static_cast<size_t>(slots.end - slots.first) * hidden;
    std::copy_n(row, floats, w.expert_output.data() + slots.first * hidden);
    row += floats;
  }
}

void DecoderModel::send_expert_rows_to_token_owners(int num_tokens) {
  Workspace& w = workspace_;
  const int64_t hidden = config_.hidden_size;
  const int ranks = shard_.tp_size;
  const int me = shard_.tp_rank;
  // Each rank sums the experts of a consecutive range of the step's tokens.
  const RowSplit tokens = RowSplit::even(num_tokens, ranks, 1);
  auto token_owner = [&](int token) {
    return static_cast<int>(std::upper_bound(tokens.begin.begin() + 1, tokens.begin.end(), token) -
                            (tokens.begin.begin() + 1));
  };
  // Which of this rank's rows go to which rank, and which rows come from which rank: every rank
  // walks the shares in the same order (rank_slots), so both ends list a message's rows alike.
  w.send_rows.resize(ranks);
  w.receive_rows.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    w.send_rows[r].clear();
    w.receive_rows[r].clear();
  }
  for (const auto& [rank, slots] : w.rank_slots) {
    for (int slot = slots.first; slot < slots.end; ++slot) {
      const int owner = token_owner(w.expert_tokens[slot]);
      if (rank == me && owner != me) w.send_rows[owner].push_back(slot);
      if (rank != me && owner == me) w.receive_rows[rank].push_back(slot);
    }
  }
  std::vector<int> send_counts(ranks), send_offsets(ranks), receive_counts(ranks),
      receive_offsets(ranks);
  int64_t send_floats = 0, receive_floats = 0;
  for (int r = 0; r < ranks; ++r) {
    send_offsets[r] = static_cast<int>(send_floats);
    send_counts[r] = static_cast<int>(w.send_rows[r].size() * hidden);
    send_floats += send_counts[r];
    receive_offsets[r] = static_cast<int>(receive_floats);
    receive_counts[r] = static_cast<int>(w.receive_rows[r].size() * hidden);
    receive_floats += receive_counts[r];
  }
  w.expert_exchange.resize(static_cast<size_t>(send_floats + receive_floats));
  float* send = w.expert_exchange.data();
  float* receive = send + send_floats;
  for (int r = 0; r < ranks; ++r) {
    for (const int slot : w.send_rows[r]) {
      std::copy_n(w.expert_output.data() + slot * hidden, hidden, send);
      send += hidden;
    }
  }
  shard_.tensor_group->all_to_all(w.expert_exchange.data(), send_counts, send_offsets, receive,
                                  receive_counts, receive_offsets);
  for (int r = 0; r < ranks; ++r) {
    for (const int slot : w.receive_rows[r]) {
      std::copy_n(receive, hidden, w.expert_output.data() + slot * hidden);
      receive += hidden;
    }
  }
  // This rank's tokens get their experts' sum, then every rank gets every token's.
  add_expert_outputs(static_cast<int>(tokens.first(me)),
                     static_cast<int>(tokens.first(me) + tokens.count(me)));
  std::vector<int> counts(ranks), offsets(ranks);
  for (int r = 0; r < ranks; ++r) {
    counts[r] = static_cast<int>(tokens.count(r) * hidden);
    offsets[r] = static_cast<int>(tokens.first(r) * hidden);
  }
  shard_.tensor_group->all_gather(w.projected.data() + offsets[me], counts, offsets,
                                  w.projected.data());
}

void DecoderModel::run_chosen_experts(const ExpertWeights& experts,
                                      std::span<const ExpertSlots> chosen, int num_tokens,
                                      ThreadPool& pool) {
  Workspace& w = workspace_;
  const MixtureOfExpertsConfig& moe = config_.moe;
  const int64_t hidden = config_.hidden_size;
  const int64_t ffn = moe.expert_ffn_size;
  const int pairs = num_tokens * moe.experts_per_token;  // (token, chosen expert) pairs
  const size_t count = chosen.size();
  const kernels::KernelLevel level = kernels::active_kernel_level();
  // Every pair's input row, expert by expert (expert_tokens' order).
  for_token_ranges(pairs, pool, [&](int first, int end) {
    for (int slot = first; slot < end; ++slot) {
      std::memcpy(w.expert_input.data() + slot * hidden,
                  w.normed.data() + w.expert_tokens[slot] * hidden, hidden * sizeof(float));
    }
  });
  while (w.expert_gate_up_inputs.size() < count) w.expert_gate_up_inputs.emplace_back();
  while (w.expert_down_inputs.size() < count) w.expert_down_inputs.emplace_back();
  w.expert_products.resize(2 * count);
  w.expert_product_inputs.resize(2 * count);
  // Each chosen expert's quantized input rows; on the pool when there are many.
  auto quantize = [&](std::deque<kernels::MatmulInput>& inputs) {
    if (pairs <= 16) {
      for (size_t i = 0; i < count; ++i) inputs[i].quantize_rows(0, inputs[i].num_tokens());
      return;
    }
    pool.parallel_for(static_cast<int64_t>(count), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) inputs[i].quantize_rows(0, inputs[i].num_tokens());
    });
  };
  auto matrices = [&](size_t i) -> ExpertCache::Resident {
    if (experts.cache_layer >= 0) return w.resident_experts[i];
    const int e = chosen[i].expert;
    return {&experts.gate[e], &experts.up[e], &experts.down[e]};
  };
  // Gate and up of every chosen expert in one pass of the pool, SwiGLU as its epilogue over
  // all pairs' rows.
  for (size_t i = 0; i < count; ++i) {
    const int first = chosen[i].first;
    const ExpertCache::Resident m = matrices(i);
    kernels::MatmulProduct* gate_up = &w.expert_products[2 * i];
    gate_up[0] = {m.gate, w.gate.data() + first * ffn};
    gate_up[1] = {m.up, w.up.data() + first * ffn};
    w.expert_gate_up_inputs[i].prepare(level, std::span<const kernels::MatmulProduct>(gate_up, 2),
                                       w.expert_input.data() + first * hidden,
                                       chosen[i].end - first);
    w.expert_product_inputs[2 * i] = w.expert_product_inputs[2 * i + 1] =
        &w.expert_gate_up_inputs[i];
  }
  quantize(w.expert_gate_up_inputs);
  auto rows = [&](int64_t begin, int64_t end) { swiglu_rows(ffn, pairs, begin, end); };
  const kernels::RowEpilogue epilogue(rows);
  kernels::matmul_each(w.expert_products, w.expert_product_inputs, pool, &epilogue);
  // Then every chosen expert's down product of its SwiGLU rows, in one pass.
  for (size_t i = 0; i < count; ++i) {
    const int first = chosen[i].first;
    kernels::MatmulProduct& down = w.expert_products[i];
    down = {matrices(i).down, w.expert_output.data() + first * hidden};
    w.expert_down_inputs[i].prepare(level, std::span<const kernels::MatmulProduct>(&down, 1),
                                    w.gate.data() + first * ffn, chosen[i].end - first);
    w.expert_product_inputs[i] = &w.expert_down_inputs[i];
  }
  quantize(w.expert_down_inputs);
  kernels::matmul_each(std::span<const kernels::MatmulProduct>(w.expert_products.data(), count),
                       std::span<const kernels::MatmulInput* const>(
                           w.expert_product_inputs.data(), count),
                       pool);
}

void DecoderModel::prefetch_next_experts(const ExpertWeights& experts, int num_tokens,
                                         ThreadPool& pool) {
  const int next = experts.model_layer + 1;
  if (next >= config_.num_layers || !weights_.layers[next].has_experts) return;
  const ExpertWeights& upcoming = weights_.layers[next].experts;
  const MixtureOfExpertsConfig& moe = config_.moe;
  Workspace& w = workspace_;
  // The residual stream changes little from one layer to the next, so the next router on this
  // layer's input mostly picks what it will pick on its own.
  w.next_router_logits.resize(static_cast<size_t>(num_tokens) * moe.num_experts);
  kernels::matmul(upcoming.router, w.normed.data(), num_tokens, w.next_router_logits.data(), pool);
  const ExpertRouter router(moe);
  w.next_chosen.resize(moe.experts_per_token);
  w.next_weights.resize(moe.experts_per_token);
  w.next_wanted.assign(moe.num_experts, 0);
  for (int t = 0; t < num_tokens; ++t) {
    router.route(w.next_router_logits.data() + static_cast<int64_t>(t) * moe.num_experts,
                 upcoming.selection_bias, w.next_chosen.data(), w.next_weights.data());
    for (const int e : w.next_chosen) w.next_wanted[e] = 1;
  }
  w.next_experts.clear();
  for (int e = 0; e < moe.num_experts; ++e) {
    if (w.next_wanted[e]) w.next_experts.push_back(e);
  }
  weights_.expert_cache->prefetch(upcoming.cache_layer, w.next_experts);
}

}  // namespace tachyon
