// The hyperparameters of a Llama-family decoder, read from GGUF metadata or a Hugging Face
// folder's config.json (hf_model_config.cpp) and validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/status.h"

#include "model_files/gguf_file.h"
#include "model_files/hf_checkpoint.h"

namespace tachyon {

// How RoPE pairs dimensions. GGUF's llama layout (Q/K rows permuted at conversion) rotates
// adjacent pairs (2j, 2j+1); NeoX layout (Qwen, unpermuted) rotates (j, j + D/2).
enum class RopeLayout { kAdjacentPairs, kNeox };

enum class RopeScaling { kNone, kLinear, kYarn, kLlama3 };

struct RopeConfig {
  RopeLayout layout = RopeLayout::kAdjacentPairs;
  int dimensions = 0;  // rotated dimensions per head (head_size; MLA: qk_rope_head_dim)
  double freq_base = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double scaling_factor = 1.0;
  int original_context_length = 0;  // YaRN: the context the model was trained with
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool has_frequency_factors = false;  // llama3: rope_freqs.weight divides inv_freq
  // YaRN's cos/sin multiplier; < 0: 0.1 ln(factor) + 1 (DeepSeek: mscale / mscale_all_dim).
  double yarn_attention_factor = -1.0;
};

// Multi-head Latent Attention (DeepSeek-V2/V3, Kimi-K2): each token's keys and values come from
// one compressed latent (kv_lora_rank values, normalised) plus one shared rotary key part, and
// only those are cached. Queries are absorbed into the latent space (W_UK folded into each
// head's query), so attention runs as one KV head of latent_size() over all query heads, and
// each head's output latent goes through W_UV.
struct LatentAttentionConfig {
  int q_lora_rank = 0;       // 0: queries projected straight from the hidden state
  int kv_lora_rank = 0;      // latent width (DeepSeek-V3: 512)
  int qk_nope_head_dim = 0;  // per-head query/key dimensions without RoPE (128)
  int qk_rope_head_dim = 0;  // per-head rotary dimensions, the key's shared by all heads (64)
  int v_head_dim = 0;        // per-head value width (128)
  // YaRN's mscale_all_dim: the softmax scale is multiplied by (0.1 mscale ln(factor) + 1)^2.
  double softmax_mscale = 0.0;
  // The q_a and kv_a RMSNorms' epsilon: the models' own code builds them with its default,
  // 1e-6, whatever rms_norm_eps says (DeepSeek's and Kimi's configs say 1e-6 too).
  float latent_norm_epsilon = 1e-6f;

  bool enabled() const { return kv_lora_rank > 0; }
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int latent_size() const { return kv_lora_rank + qk_rope_head_dim; }
};

enum class ExpertScoring { kSoftmax, kSigmoid };
// How an expert group is scored when selection is group-limited: DeepSeek-V2 takes the
// group's best score, DeepSeek-V3 the sum of its best two (with the selection bias).
enum class ExpertGroupScore { kMax, kTopTwoSum };

// Mixture of Experts feed-forward layers (Mixtral, Qwen3-MoE, DeepSeek-V2/V3, Kimi-K2): a router
// scores every expert per token, the best experts_per_token are run and their outputs summed
// with the (optionally normalised and scaled) scores as weights, plus shared experts run for
// every token.
struct MixtureOfExpertsConfig {
  int num_experts = 0;        // 0: a dense model
  int experts_per_token = 0;
  int expert_ffn_size = 0;    // each routed expert's intermediate width
  int shared_ffn_size = 0;    // the shared experts' intermediate width together (0: none)
  int first_dense_layers = 0;  // leading layers with a dense FFN of ffn_size
  ExpertScoring scoring = ExpertScoring::kSoftmax;
  bool normalize_weights = false;  // chosen weights divided by their sum
  double weights_scale = 1.0;      // routed_scaling_factor
  int num_groups = 1;              // group-limited selection: experts chosen from the
  int groups_used = 1;             // best groups_used of num_groups groups
  ExpertGroupScore group_score = ExpertGroupScore::kTopTwoSum;
  bool has_selection_bias = false;  // e_score_correction_bias: added for choosing only
  bool shared_expert_gated = false;  // Qwen2-MoE: the shared expert scaled by sigmoid(x · g)

  bool enabled() const { return num_experts > 0; }
  bool layer_has_experts(int layer) const { return enabled() && layer >= first_dense_layers; }
};

// The feed-forward block's gate activation: silu (SwiGLU) or gelu with the tanh approximation
// (GeGLU: Gemma).
enum class FeedForwardActivation { kSilu, kGeluTanh };

struct ModelConfig {
  // "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "deepseek2", "gemma3"
  std::string architecture;
  int num_layers = 0;
  int hidden_size = 0;
  int ffn_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rms_norm_epsilon = 1e-5f;
  bool qkv_bias = false;       // Qwen2: bias on Q, K and V projections
  bool qk_norm = false;        // Qwen3: per-head RMSNorm on Q and K before RoPE
  bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight
  RopeConfig rope;
  // Sliding-window (local) attention: in a local layer the token at position p attends only to
  // positions p - sliding_window + 1 .. p. 0: every layer attends to everything. Gemma 3
  // interleaves local and global layers (five local, then one global); Mistral's are all local.
  int sliding_window = 0;
  std::vector<bool> local_layers;  // [num_layers]; empty when sliding_window is 0
  // The local layers' RoPE (Gemma 3: base 10000, unscaled); the same as `rope` otherwise.
  RopeConfig local_rope;
  // Gemma 3's block: the embeddings times sqrt(hidden), an RMSNorm on each block's output
  // before its residual add (post_attention_norm, post_ffw_norm), GeGLU.
  float embedding_scale = 1.0f;
  bool post_norms = false;
  FeedForwardActivation ffn_activation = FeedForwardActivation::kSilu;
  // The softmax's scale is 1/sqrt(attention_scale_dim) (Gemma's query_pre_attn_scalar);
  // 0: 1/sqrt(head_size).
  int attention_scale_dim = 0;
  // With MLA, num_kv_heads is 1 and head_size the latent's size: queries are [num_heads,
  // latent] after absorption, the cache holds one latent per token.
  LatentAttentionConfig mla;
  MixtureOfExpertsConfig moe;
  // Multi-token prediction layers after the num_layers of the trunk (DeepSeek-V3's layer 61):
  // loaded and kept for speculative decoding, not run by forward().
  int num_mtp_layers = 0;

  int q_size() const { return num_heads * head_size; }
  bool layer_is_local(int layer) const {
    return sliding_window > 0 && local_layers[static_cast<size_t>(layer)];
  }
  bool has_local_layers() const { return sliding_window > 0; }
  // MLA's cached latent serves as both key and value: caches store it once.
  bool kv_values_are_keys() const { return mla.enabled(); }
  int kv_size() const { return num_kv_heads * head_size; }

  // Supported architectures: llama (Llama 2/3, Mistral, SmolLM, Mixtral), qwen2, qwen3,
  // qwen2moe, qwen3moe, deepseek2 (DeepSeek-V2/V3, Kimi-K2, Moonlight), gemma3 (text).
  static Result<ModelConfig> from_gguf(const GgufFile& file);
  // The same from config.json (model_type llama, mistral, mixtral, qwen2, qwen3, qwen2_moe,
  // qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, gemma3_text).
  static Result<ModelConfig> from_hf_checkpoint(const HfCheckpoint& checkpoint);
  // The same from config.json's parsed object.
  static Result<ModelConfig> from_hf_config(const boost::json::object& config);

  // Sets the RoPE layout, qkv_bias and qk_norm that `architecture` implies; unsupported when
  // it is none of the supported ones.
  Status set_architecture_traits();
  // Checks the MLA and MoE numbers against each other (e.g. no more experts used than exist)
  // and the sliding window against the layers.
  Status validate_attention_and_experts() const;
  // Every layer local (sliding_window > 0) or none; Gemma 3 sets its own pattern.
  void set_sliding_window(int window);
};

// llama3 RoPE scaling's per-pair frequency divisors (f32 [head_size / 2]) from config.json's
// rope_scaling, computed as llama.cpp's converter computes rope_freqs.weight.
Result<std::vector<float>> llama3_frequency_factors(const HfCheckpoint& checkpoint,
                                                    const ModelConfig& config);

}  // namespace tachyon
