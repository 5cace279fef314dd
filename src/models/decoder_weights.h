// The tensors of a Llama-family decoder, found by their GGUF names (or the Hugging Face names
// they map to) and checked against the config. Matrices stay in their stored type.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/huge_page_arena.h"
#include "core/memory_amount.h"
#include "kernels/cpu/matmul.h"
#include "model_files/gguf_file.h"
#include "model_files/hf_checkpoint.h"
#include "models/expert_cache.h"
#include "models/model_config.h"
#include "models/model_shard.h"

namespace tachyon {

// A layer's Multi-head Latent Attention (LatentAttentionConfig), instead of query/key/value.
struct LatentAttentionWeights {
  kernels::WeightMatrix query;          // [heads * qk_head_dim, hidden] when q_lora_rank is 0
  kernels::WeightMatrix query_a;        // [q_lora_rank, hidden]
  const float* query_a_norm = nullptr;  // f32 [q_lora_rank]
  kernels::WeightMatrix query_b;        // [heads * qk_head_dim, q_lora_rank]
  kernels::WeightMatrix kv_a;           // [kv_lora_rank + qk_rope_head_dim, hidden]
  const float* kv_a_norm = nullptr;     // f32 [kv_lora_rank]
  // Per head: W_UK transposed, [kv_lora_rank, qk_nope_head_dim] (folds the head's query into
  // the latent space), and W_UV, [v_head_dim, kv_lora_rank] (the head's value from its output
  // latent). llama.cpp's attn_k_b / attn_v_b, or cut from attn_kv_b / kv_b_proj at load.
  std::vector<kernels::WeightMatrix> key_absorb;
  std::vector<kernels::WeightMatrix> value_up;
  // Per head: W_UK itself, f32 [qk_nope_head_dim, kv_lora_rank], for keys decompressed from
  // the latent (DecoderModel::set_mla_attention builds them; empty until then).
  std::vector<kernels::WeightMatrix> key_up;
};

// A layer's routed and shared experts (MixtureOfExpertsConfig), instead of gate/up/down.
struct ExpertWeights {
  kernels::WeightMatrix router;            // [experts, hidden]
  const float* selection_bias = nullptr;   // f32 [experts], DeepSeek-V3's choice-only bias
  std::vector<kernels::WeightMatrix> gate;  // per expert [expert_ffn, hidden]
  std::vector<kernels::WeightMatrix> up;    // per expert [expert_ffn, hidden]
  std::vector<kernels::WeightMatrix> down;  // per expert [hidden, expert_ffn]
  kernels::WeightMatrix shared_gate;        // [shared_ffn, hidden], when there are shared experts
  kernels::WeightMatrix shared_up;          // [shared_ffn, hidden]
  kernels::WeightMatrix shared_down;        // [hidden, shared_ffn]
  const float* shared_gate_vector = nullptr;  // f32 [hidden], Qwen2-MoE's shared expert gate
  // --experts-mem: gate/up/down are views into the file's mapping, never read by the kernels;
  // DecoderWeights::expert_cache gives the chosen ones under this index. -1: resident.
  int cache_layer = -1;
  int model_layer = -1;  // the layer's index in the model (MTP layers after the trunk's)
  // The resident routed experts' working copies (a layer's own memory, freed when a new
  // placement loads the layer's experts again); null with --experts-mem.
  std::shared_ptr<HugePageArena> routed_memory;
};

struct LayerWeights {
  const float* attention_norm = nullptr;  // f32 [hidden]
  kernels::WeightMatrix query;             // [q_size rows, hidden cols]
  kernels::WeightMatrix key;               // [kv_size, hidden]
  kernels::WeightMatrix value;             // [kv_size, hidden]
  kernels::WeightMatrix attention_output;  // [hidden, q_size] (MLA: [hidden, heads * v_head_dim])
  const float* query_bias = nullptr;       // f32 [q_size], Qwen2 only
  const float* key_bias = nullptr;         // f32 [kv_size], Qwen2 only
  const float* value_bias = nullptr;       // f32 [kv_size], Qwen2 only
  const float* query_norm = nullptr;       // f32 [head_size], Qwen3 only
  const float* key_norm = nullptr;         // f32 [head_size], Qwen3 only
  const float* ffn_norm = nullptr;         // f32 [hidden]
  // Gemma: the attention's and the FFN's outputs are normalised before their residual add.
  const float* post_attention_norm = nullptr;  // f32 [hidden]
  const float* post_ffn_norm = nullptr;        // f32 [hidden]
  kernels::WeightMatrix gate;              // [ffn, hidden]
  kernels::WeightMatrix up;                // [ffn, hidden]
  kernels::WeightMatrix down;              // [hidden, ffn]
  LatentAttentionWeights mla;              // MLA models only
  ExpertWeights experts;                   // MoE layers only (layer_has_experts)
  bool has_experts = false;
};

// A multi-token prediction layer (ModelConfig::num_mtp_layers, DeepSeek-V3's "NextN"): a
// decoder layer whose input is eh_proj · [enorm(embedding of token t+1), hnorm(the trunk's last
// hidden state at t)], predicting token t+2 through head_norm and the head. Kept for
// speculative decoding.
struct MtpLayerWeights {
  LayerWeights layer;
  kernels::WeightMatrix eh_proj;        // [hidden, 2 * hidden]
  const float* enorm = nullptr;         // f32 [hidden]
  const float* hnorm = nullptr;         // f32 [hidden]
  const float* head_norm = nullptr;     // f32 [hidden]
  kernels::WeightMatrix embedding;      // [vocab, hidden]: its own copy, else the trunk's
  kernels::WeightMatrix head;           // [vocab, hidden]: its own copy, else the trunk's output
};

struct DecoderWeights {
  kernels::WeightMatrix token_embedding;  // [vocab, hidden]
  const float* output_norm = nullptr;     // f32 [hidden]
  kernels::WeightMatrix output;           // [vocab, hidden]; the embedding when tied
  std::vector<float> rope_frequency_factors;  // f32 [head_size/2], llama3 only
  std::vector<LayerWeights> layers;
  std::vector<MtpLayerWeights> mtp_layers;  // ModelConfig::num_mtp_layers of them
  int experts_per_token = 0;  // of the MoE layers' experts, as the config says

  // `quantize` (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0): F32, F16 and BF16 matrices (and FP8 ones,
  // after their BF16 dequantization) are quantized at load, byte for byte as the gguf package
  // would (reference::quantize_weights); others stay as stored.
  // `experts_memory` (--experts-mem; empty: everything resident): the routed experts stay in
  // the file, at most that much of them resident in `expert_cache`.
  // `shard` (several processes running the model; null: the whole model): only its layers'
  // and its rows' weights are read (ModelShard); the other layers stay empty.
  static Result<DecoderWeights> load(const GgufFile& file, const ModelConfig& config,
                                     std::optional<DType> quantize = std::nullopt,
                                     const MemoryAmount& experts_memory = {},
                                     const ModelShard* shard = nullptr);
  // From a Hugging Face folder's safetensors (F32/F16/BF16, block-scaled FP8): the same matrices
  // as the GGUF file llama.cpp's converter writes from it (the llama layout's Q/K rows
  // interleaved per head).
  static Result<DecoderWeights> load(const HfCheckpoint& checkpoint, const ModelConfig& config,
                                     std::optional<DType> quantize = std::nullopt,
                                     const ModelShard* shard = nullptr);
  // Expert parallelism: loads the routed experts `shard` owns (a new ExpertPlacement) in every
  // MoE layer of the stage from `file` again, the same way as at load, layer by layer, freeing
  // each layer's old ones. Not with --experts-mem.
  Status reload_experts(const GgufFile& file, const ModelConfig& config, const ModelShard& shard);
  // Bytes of working copies in memory (the arena and every layer's routed experts).
  size_t resident_bytes() const;
  // Tells every matrix how far ahead the decode kernels should prefetch it, from the bytes a
  // decode step streams (kernels::decode_prefetch_bytes: near when they come from memory).
  void set_decode_prefetch();
  // Weight bytes one decoded token reads: every matrix once (the output too), of the routed
  // experts the experts_per_token it chooses.
  double decode_weight_bytes() const;

  std::optional<DType> quantize;  // as loaded (--quantize), for reload_experts
  // Vectors stored in another type than f32 (rare) are converted once and kept here.
  std::vector<std::unique_ptr<std::vector<float>>> converted_vectors;
  // Matrices rearranged at load (Hugging Face Q/K rows for the llama layout), before copying.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> converted_bytes;
  // The matrices' working copies, repacked for the SIMD kernels where they have a layout
  // (WeightMatrix::packed) or as stored (WeightMatrix::data).
  std::unique_ptr<HugePageArena> arena = std::make_unique<HugePageArena>();
  // The routed experts' resident part, with --experts-mem (else null).
  std::unique_ptr<ExpertCache> expert_cache;
};

}  // namespace tachyon
