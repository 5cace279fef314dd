// The hyperparameters of a Llama-family decoder, read from GGUF metadata or a Hugging Face
// folder's config.json (hf_model_config.cpp) and validated.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include <vector>

#include "model_files/gguf_file.h"
#include "model_files/hf_checkpoint.h"

namespace tachyon {

// How RoPE pairs dimensions. GGUF's llama layout (Q/K rows permuted at conversion) rotates
// adjacent pairs (2j, 2j+1); NeoX layout (Qwen, unpermuted) rotates (j, j + D/2).
enum class RopeLayout { kAdjacentPairs, kNeox };

enum class RopeScaling { kNone, kLinear, kYarn, kLlama3 };

struct RopeConfig {
  RopeLayout layout = RopeLayout::kAdjacentPairs;
  int dimensions = 0;  // rotated dimensions per head (= head_size here)
  double freq_base = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double scaling_factor = 1.0;
  int original_context_length = 0;  // YaRN: the context the model was trained with
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool has_frequency_factors = false;  // llama3: rope_freqs.weight divides inv_freq
};

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", ...
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

  int q_size() const { return num_heads * head_size; }
  int kv_size() const { return num_kv_heads * head_size; }

  // Supported architectures: llama (Llama 2/3, Mistral, SmolLM), qwen2, qwen3.
  static Result<ModelConfig> from_gguf(const GgufFile& file);
  // The same from config.json (model_type llama, mistral, qwen2, qwen3).
  static Result<ModelConfig> from_hf_checkpoint(const HfCheckpoint& checkpoint);

  // Sets the RoPE layout, qkv_bias and qk_norm that `architecture` implies; unsupported when
  // it is none of the supported ones.
  Status set_architecture_traits();
};

// llama3 RoPE scaling's per-pair frequency divisors (f32 [head_size / 2]) from config.json's
// rope_scaling, computed as llama.cpp's converter computes rope_freqs.weight.
Result<std::vector<float>> llama3_frequency_factors(const HfCheckpoint& checkpoint,
                                                    const ModelConfig& config);

}  // namespace tachyon
