#include "models/model_config.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tachyon {
namespace {

struct ArchitectureTraits {
  const char* name;
  RopeLayout rope_layout;
  bool qkv_bias;
  bool qk_norm;
};

constexpr ArchitectureTraits kArchitectures[] = {
    {"llama", RopeLayout::kAdjacentPairs, false, false},
    {"qwen2", RopeLayout::kNeox, true, false},
    {"qwen3", RopeLayout::kNeox, false, true},
    {"qwen2moe", RopeLayout::kNeox, true, false},
    {"qwen3moe", RopeLayout::kNeox, false, true},
    // MLA's rotary dimensions are stored in adjacent pairs, unpermuted.
    {"deepseek2", RopeLayout::kAdjacentPairs, false, false},
    {"gemma3", RopeLayout::kNeox, false, true},
};

class MetadataReader {
 public:
  MetadataReader(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  Result<int> positive(const std::string& key, int max_value = 1 << 24) const {
    const std::string full = prefix_ + key;
    const std::optional<uint64_t> value = file_.get_uint(full);
    if (!value) {
      return corrupt_data(fmt::format("model metadata '{}' is missing or not an integer", full));
    }
    if (*value == 0 || *value > static_cast<uint64_t>(max_value)) {
      return corrupt_data(fmt::format("model metadata '{}' is {}, expected 1..{}", full, *value,
                                      max_value));
    }
    return static_cast<int>(*value);
  }
  std::optional<uint64_t> optional_uint(const std::string& key) const {
    return file_.get_uint(prefix_ + key);
  }
  std::optional<double> optional_float(const std::string& key) const {
    return file_.get_float(prefix_ + key);
  }
  std::optional<std::string> optional_string(const std::string& key) const {
    return file_.get_string(prefix_ + key);
  }
  std::optional<bool> optional_bool(const std::string& key) const {
    return file_.get_bool(prefix_ + key);
  }
  // A count that may be 0 (absent: `fallback`).
  Result<int> count_or(const std::string& key, int fallback, int max_value = 1 << 24) const {
    const std::optional<uint64_t> value = optional_uint(key);
    if (!value) return fallback;
    if (*value > static_cast<uint64_t>(max_value)) {
      return corrupt_data(fmt::format("model metadata '{}{}' is {}, expected 0..{}", prefix_, key,
                                      *value, max_value));
    }
    return static_cast<int>(*value);
  }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

}  // namespace

Status ModelConfig::set_architecture_traits() {
  for (const ArchitectureTraits& traits : kArchitectures) {
    if (architecture == traits.name) {
      rope.layout = traits.rope_layout;
      qkv_bias = traits.qkv_bias;
      qk_norm = traits.qk_norm;
      return Status();
    }
  }
  return unsupported(fmt::format("architecture '{}' is not supported; supported: llama, qwen2, "
                                 "qwen3, qwen2moe, qwen3moe, deepseek2, gemma3",
                                 architecture));
}

void ModelConfig::set_sliding_window(int window) {
  sliding_window = window;
  local_layers.assign(window > 0 ? num_layers : 0, true);
}

Status ModelConfig::validate_attention_and_experts() const {
  if (sliding_window < 0 ||
      (sliding_window > 0 && static_cast<int>(local_layers.size()) != num_layers)) {
    return corrupt_data(fmt::format("sliding window {} over {} layer kinds for {} layers",
                                    sliding_window, local_layers.size(), num_layers));
  }
  if (sliding_window > 0 && mla.enabled()) {
    return unsupported("sliding-window attention with MLA is not supported");
  }
  if (mla.enabled()) {
    if (mla.qk_nope_head_dim < 1 || mla.qk_rope_head_dim < 2 || mla.qk_rope_head_dim % 2 != 0 ||
        mla.v_head_dim < 1 || mla.q_lora_rank < 0) {
      return corrupt_data(fmt::format("MLA dimensions do not fit: q_lora_rank {}, "
                                      "qk_nope_head_dim {}, qk_rope_head_dim {} (even, >= 2), "
                                      "v_head_dim {}",
                                      mla.q_lora_rank, mla.qk_nope_head_dim,
                                      mla.qk_rope_head_dim, mla.v_head_dim));
    }
    if (num_kv_heads != 1 || head_size != mla.latent_size() ||
        rope.dimensions != mla.qk_rope_head_dim) {
      return corrupt_data("inconsistent MLA configuration");  // our own derivation, not the file's
    }
  }
  if (moe.enabled()) {
    if (moe.experts_per_token < 1 || moe.experts_per_token > moe.num_experts) {
      return corrupt_data(fmt::format("the router uses {} experts per token of {} experts",
                                      moe.experts_per_token, moe.num_experts));
    }
    if (moe.expert_ffn_size < 1) {
      return corrupt_data(fmt::format("expert feed-forward length is {}", moe.expert_ffn_size));
    }
    if (moe.num_groups < 1 || moe.num_experts % moe.num_groups != 0 || moe.groups_used < 1 ||
        moe.groups_used > moe.num_groups) {
      return corrupt_data(fmt::format("{} experts in {} groups, {} groups used: the groups must "
                                      "divide the experts and be used 1..{}",
                                      moe.num_experts, moe.num_groups, moe.groups_used,
                                      moe.num_groups));
    }
    const int per_group = moe.num_experts / moe.num_groups;
    if (moe.num_groups > 1 && moe.group_score == ExpertGroupScore::kTopTwoSum && per_group < 2) {
      return corrupt_data(fmt::format("groups of {} expert score by their best two", per_group));
    }
    if (moe.groups_used * per_group < moe.experts_per_token) {
      return corrupt_data(fmt::format("{} of {} groups hold {} experts, fewer than the {} used per "
                                      "token",
                                      moe.groups_used, moe.num_groups,
                                      moe.groups_used * per_group, moe.experts_per_token));
    }
    if (moe.first_dense_layers > num_layers) {
      return corrupt_data(fmt::format("{} leading dense layers in a model of {} layers",
                                      moe.first_dense_layers, num_layers));
    }
    if (!(moe.weights_scale > 0) || !std::isfinite(moe.weights_scale)) {
      return corrupt_data(fmt::format("expert weights scale is {}", moe.weights_scale));
    }
  }
  return Status();
}

namespace {

// The experts' metadata as llama.cpp's converter writes it (absent expert_count: dense).
Status read_gguf_experts(const MetadataReader& meta, const GgufFile& file,
                         ModelConfig& config) {
  MixtureOfExpertsConfig& moe = config.moe;
  TACHYON_ASSIGN_OR_RETURN(moe.num_experts, meta.count_or("expert_count", 0));
  if (moe.num_experts == 0) return Status();
  TACHYON_ASSIGN_OR_RETURN(moe.experts_per_token, meta.count_or("expert_used_count", 0));
  // Mixtral's experts are feed_forward_length wide; the others say so.
  TACHYON_ASSIGN_OR_RETURN(moe.expert_ffn_size,
                           meta.count_or("expert_feed_forward_length", config.ffn_size));
  TACHYON_ASSIGN_OR_RETURN(const int shared, meta.count_or("expert_shared_count", 0, 1 << 10));
  moe.shared_ffn_size = shared * moe.expert_ffn_size;
  TACHYON_ASSIGN_OR_RETURN(moe.first_dense_layers, meta.count_or("leading_dense_block_count", 0));
  TACHYON_ASSIGN_OR_RETURN(moe.num_groups, meta.count_or("expert_group_count", 1));
  TACHYON_ASSIGN_OR_RETURN(moe.groups_used, meta.count_or("expert_group_used_count", 1));
  moe.group_score = ExpertGroupScore::kTopTwoSum;
  if (config.architecture == "deepseek2") {
    // expert_gating_func: 1 softmax (DeepSeek-V2, the default), 2 sigmoid (V3, Kimi-K2).
    const uint64_t gating = meta.optional_uint("expert_gating_func").value_or(1);
    if (gating != 1 && gating != 2) {
      return unsupported(fmt::format("expert gating function {} (tachyon takes 1 softmax, "
                                     "2 sigmoid)",
                                     gating));
    }
    moe.scoring = gating == 2 ? ExpertScoring::kSigmoid : ExpertScoring::kSoftmax;
    moe.normalize_weights = meta.optional_bool("expert_weights_norm").value_or(false);
    moe.weights_scale = meta.optional_float("expert_weights_scale").value_or(1.0);
  } else if (config.architecture == "qwen2moe") {
    // Softmax, the chosen weights as they are, one shared expert behind a sigmoid gate.
    moe.scoring = ExpertScoring::kSoftmax;
    moe.normalize_weights = false;
    TACHYON_ASSIGN_OR_RETURN(moe.shared_ffn_size,
                             meta.count_or("expert_shared_feed_forward_length", 0));
    moe.shared_expert_gated = moe.shared_ffn_size > 0;
  } else {
    // Mixtral and Qwen3-MoE: softmax, the chosen weights renormalised.
    moe.scoring = ExpertScoring::kSoftmax;
    moe.normalize_weights = true;
  }
  moe.has_selection_bias = file.find_tensor(fmt::format(
                               "blk.{}.exp_probs_b.bias", moe.first_dense_layers)) != nullptr;
  return Status();
}

// deepseek2's attention: either llama.cpp's current layout (one KV head of the latent, with
// key_length_mla / value_length_mla and split attn_k_b / attn_v_b tensors) or the older one
// (key_length = nope + rope per head, attn_kv_b).
Status read_gguf_latent_attention(const MetadataReader& meta, ModelConfig& config) {
  LatentAttentionConfig& mla = config.mla;
  TACHYON_ASSIGN_OR_RETURN(mla.q_lora_rank, meta.count_or("attention.q_lora_rank", 0));
  TACHYON_ASSIGN_OR_RETURN(mla.kv_lora_rank, meta.positive("attention.kv_lora_rank"));
  TACHYON_ASSIGN_OR_RETURN(mla.qk_rope_head_dim, meta.positive("rope.dimension_count", 4096));
  int key_length = 0;
  int value_length = 0;
  if (meta.optional_uint("attention.key_length_mla")) {
    TACHYON_ASSIGN_OR_RETURN(key_length, meta.positive("attention.key_length_mla", 4096));
    TACHYON_ASSIGN_OR_RETURN(value_length, meta.positive("attention.value_length_mla", 4096));
  } else {
    TACHYON_ASSIGN_OR_RETURN(key_length, meta.positive("attention.key_length", 4096));
    TACHYON_ASSIGN_OR_RETURN(value_length, meta.positive("attention.value_length", 4096));
  }
  mla.qk_nope_head_dim = key_length - mla.qk_rope_head_dim;
  mla.v_head_dim = value_length;
  if (const std::optional<double> log_multiplier =
          meta.optional_float("rope.scaling.yarn_log_multiplier")) {
    // The converter writes 0.1 * mscale_all_dim.
    mla.softmax_mscale = *log_multiplier / 0.1;
  }
  config.num_kv_heads = 1;
  config.head_size = mla.latent_size();
  return Status();
}

// `<arch>.attention.sliding_window`: Gemma 3's layers alternate (llama.cpp's rule: every
// pattern-th layer global, pattern 6 unless the file says); any other architecture's are all
// local (Mistral's).
Status read_gguf_sliding_window(const MetadataReader& meta, ModelConfig& config) {
  TACHYON_ASSIGN_OR_RETURN(const int window, meta.count_or("attention.sliding_window", 0));
  config.set_sliding_window(window);
  if (window == 0 || config.architecture != "gemma3") return Status();
  TACHYON_ASSIGN_OR_RETURN(const int pattern,
                           meta.count_or("attention.sliding_window_pattern", 6, 4096));
  for (int i = 0; i < config.num_layers; ++i) {
    config.local_layers[i] = pattern == 0 || (i + 1) % pattern != 0;
  }
  return Status();
}

// Gemma 3's traits as llama.cpp reads them: local layers' RoPE at base 10000 unscaled, the
// softmax scaled by 1/sqrt(head size) (by 1/sqrt(hidden / heads) for the 62-layer 27B, whose
// query_pre_attn_scalar the file does not carry), no logit soft-capping.
Status read_gguf_gemma3(const MetadataReader& meta, ModelConfig& config) {
  config.embedding_scale = std::sqrt(static_cast<float>(config.hidden_size));
  config.post_norms = true;
  config.ffn_activation = FeedForwardActivation::kGeluTanh;
  config.local_rope.freq_base = 10000.0;
  config.local_rope.scaling = RopeScaling::kNone;
  config.local_rope.scaling_factor = 1.0;
  config.attention_scale_dim = config.num_layers == 62 ? config.hidden_size / config.num_heads
                                                       : config.head_size;
  const double softcap = meta.optional_float("final_logit_softcapping").value_or(0.0);
  if (softcap != 0.0) {
    return unsupported(fmt::format("final logit soft-capping ({}) is not supported", softcap));
  }
  return Status();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  const std::optional<std::string> architecture = file.get_string("general.architecture");
  if (!architecture) return corrupt_data("model metadata 'general.architecture' is missing");
  config.architecture = *architecture;
  TACHYON_RETURN_IF_ERROR(config.set_architecture_traits());

  const MetadataReader meta(file, config.architecture + ".");
  TACHYON_ASSIGN_OR_RETURN(config.num_layers, meta.positive("block_count", 4096));
  // block_count includes the multi-token prediction layers, which come last.
  TACHYON_ASSIGN_OR_RETURN(config.num_mtp_layers, meta.count_or("nextn_predict_layers", 0, 16));
  if (config.num_mtp_layers >= config.num_layers) {
    return corrupt_data(fmt::format("{} of {} layers are multi-token prediction layers",
                                    config.num_mtp_layers, config.num_layers));
  }
  config.num_layers -= config.num_mtp_layers;
  TACHYON_ASSIGN_OR_RETURN(config.hidden_size, meta.positive("embedding_length"));
  TACHYON_ASSIGN_OR_RETURN(config.ffn_size, meta.positive("feed_forward_length"));
  TACHYON_ASSIGN_OR_RETURN(config.num_heads, meta.positive("attention.head_count", 4096));
  config.num_kv_heads = config.num_heads;
  if (config.architecture == "deepseek2") {
    TACHYON_RETURN_IF_ERROR(read_gguf_latent_attention(meta, config));
  } else if (meta.optional_uint("attention.head_count_kv")) {
    TACHYON_ASSIGN_OR_RETURN(config.num_kv_heads, meta.positive("attention.head_count_kv", 4096));
  }
  if (config.num_heads % config.num_kv_heads != 0) {
    return corrupt_data(fmt::format("{} query heads cannot be shared evenly by {} key/value heads",
                                    config.num_heads, config.num_kv_heads));
  }
  if (config.mla.enabled()) {
    // head_size is the latent's (read_gguf_latent_attention).
  } else if (meta.optional_uint("attention.key_length")) {
    TACHYON_ASSIGN_OR_RETURN(config.head_size, meta.positive("attention.key_length", 4096));
    const std::optional<uint64_t> value_length = meta.optional_uint("attention.value_length");
    if (value_length && *value_length != static_cast<uint64_t>(config.head_size)) {
      return unsupported(fmt::format("key length {} differs from value length {}",
                                     config.head_size, *value_length));
    }
  } else {
    if (config.hidden_size % config.num_heads != 0) {
      return corrupt_data(fmt::format("embedding length {} is not a multiple of {} heads",
                                      config.hidden_size, config.num_heads));
    }
    config.head_size = config.hidden_size / config.num_heads;
  }
  if (!config.mla.enabled() && config.head_size % 2 != 0) {
    return corrupt_data(fmt::format("head size {} is odd; RoPE needs pairs", config.head_size));
  }
  TACHYON_ASSIGN_OR_RETURN(config.context_length, meta.positive("context_length", 1 << 24));
  config.rms_norm_epsilon =
      static_cast<float>(meta.optional_float("attention.layer_norm_rms_epsilon").value_or(1e-5));

  RopeConfig& rope = config.rope;
  rope.dimensions = static_cast<int>(meta.optional_uint("rope.dimension_count").value_or(config.head_size));
  if (config.mla.enabled()) {
    rope.dimensions = config.mla.qk_rope_head_dim;
  } else if (rope.dimensions != config.head_size) {
    return unsupported(fmt::format("partial RoPE ({} of {} dimensions) is not supported",
                                   rope.dimensions, config.head_size));
  }
  rope.freq_base = meta.optional_float("rope.freq_base").value_or(10000.0);
  const std::string scaling = meta.optional_string("rope.scaling.type").value_or("none");
  rope.scaling_factor = meta.optional_float("rope.scaling.factor").value_or(1.0);
  if (scaling == "none" || scaling.empty()) {
    rope.scaling = RopeScaling::kNone;
  } else if (scaling == "linear") {
    rope.scaling = RopeScaling::kLinear;
  } else if (scaling == "yarn") {
    rope.scaling = RopeScaling::kYarn;
    rope.original_context_length = static_cast<int>(
        meta.optional_uint("rope.scaling.original_context_length").value_or(config.context_length));
    rope.yarn_beta_fast = meta.optional_float("rope.scaling.yarn_beta_fast").value_or(32.0);
    rope.yarn_beta_slow = meta.optional_float("rope.scaling.yarn_beta_slow").value_or(1.0);
    // DeepSeek's YaRN (mscale = mscale_all_dim in every released model): cos and sin
    // unscaled, the softmax sharpened instead (LatentAttentionConfig::softmax_mscale).
    if (config.mla.softmax_mscale > 0) rope.yarn_attention_factor = 1.0;
  } else {
    return unsupported(fmt::format("RoPE scaling '{}' is not supported (none, linear, yarn, and "
                                   "llama3 through rope_freqs.weight)",
                                   scaling));
  }
  if (!(rope.scaling_factor > 0)) {
    return corrupt_data(fmt::format("RoPE scaling factor is {}, expected > 0", rope.scaling_factor));
  }
  if (file.find_tensor("rope_freqs.weight")) {
    rope.has_frequency_factors = true;
    if (rope.scaling == RopeScaling::kNone) rope.scaling = RopeScaling::kLlama3;
  }
  config.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  config.local_rope = rope;
  TACHYON_RETURN_IF_ERROR(read_gguf_sliding_window(meta, config));
  if (config.architecture == "gemma3") TACHYON_RETURN_IF_ERROR(read_gguf_gemma3(meta, config));

  const GgufTensorInfo* embedding = file.find_tensor("token_embd.weight");
  if (!embedding) return corrupt_data("tensor 'token_embd.weight' is missing");
  if (embedding->shape.size() != 2 || embedding->shape[0] != config.hidden_size) {
    return corrupt_data(fmt::format("tensor 'token_embd.weight' has shape [{}], expected [{}, vocab]",
                                    fmt::join(embedding->shape, ", "), config.hidden_size));
  }
  config.vocab_size = static_cast<int>(embedding->shape[1]);
  TACHYON_RETURN_IF_ERROR(read_gguf_experts(meta, file, config));
  TACHYON_RETURN_IF_ERROR(config.validate_attention_and_experts());
  return config;
}

}  // namespace tachyon
