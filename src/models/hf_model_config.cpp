// ModelConfig from a Hugging Face folder's config.json (transformers' LlamaConfig, Qwen2Config,
// Qwen3Config fields and defaults).
#include <cmath>
#include <numbers>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "models/model_config.h"

namespace tachyon {
namespace {

// Reads config.json's fields, each error naming the field and the value.
class ConfigReader {
 public:
  explicit ConfigReader(const boost::json::object& config) : config_(config) {}

  Result<int> positive(std::string_view key, int max_value = 1 << 24) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr) return corrupt_data(fmt::format("config.json has no \"{}\"", key));
    return positive_value(key, *value, max_value);
  }
  Result<int> positive_or(std::string_view key, int fallback, int max_value = 1 << 24) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || value->is_null()) return fallback;
    return positive_value(key, *value, max_value);
  }
  Result<double> number_or(std::string_view key, double fallback) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_number()) {
      return corrupt_data(fmt::format("config.json \"{}\" is {}, not a number", key,
                                      boost::json::serialize(*value)));
    }
    return value->to_number<double>();
  }
  // A count that may be 0 or null (absent or null: `fallback`).
  Result<int> count_or(std::string_view key, int fallback, int max_value = 1 << 24) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_int64() || value->get_int64() < 0 || value->get_int64() > max_value) {
      return corrupt_data(fmt::format("config.json \"{}\" is {}, expected an integer 0..{}", key,
                                      boost::json::serialize(*value), max_value));
    }
    return static_cast<int>(value->get_int64());
  }
  std::string string_or(std::string_view key, std::string_view fallback) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || !value->is_string()) return std::string(fallback);
    return std::string(value->get_string());
  }
  Result<bool> bool_or(std::string_view key, bool fallback) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_bool()) {
      return corrupt_data(fmt::format("config.json \"{}\" is {}, not true or false", key,
                                      boost::json::serialize(*value)));
    }
    return value->get_bool();
  }

  const boost::json::value* find(std::string_view key) const { return config_.if_contains(key); }

 private:
  static Result<int> positive_value(std::string_view key, const boost::json::value& value,
                                    int max_value) {
    if (!value.is_int64() || value.get_int64() < 1 || value.get_int64() > max_value) {
      return corrupt_data(fmt::format("config.json \"{}\" is {}, expected an integer 1..{}", key,
                                      boost::json::serialize(value), max_value));
    }
    return static_cast<int>(value.get_int64());
  }

  const boost::json::object& config_;
};

// DeepSeek-V2/V3's (and Kimi-K2's) MLA fields; num_kv_heads and head_size become the latent's.
Status read_latent_attention(const ConfigReader& read, ModelConfig& config) {
  LatentAttentionConfig& mla = config.mla;
  TACHYON_ASSIGN_OR_RETURN(mla.q_lora_rank, read.count_or("q_lora_rank", 0));
  TACHYON_ASSIGN_OR_RETURN(mla.kv_lora_rank, read.positive("kv_lora_rank"));
  TACHYON_ASSIGN_OR_RETURN(mla.qk_nope_head_dim, read.positive("qk_nope_head_dim", 4096));
  TACHYON_ASSIGN_OR_RETURN(mla.qk_rope_head_dim, read.positive("qk_rope_head_dim", 4096));
  TACHYON_ASSIGN_OR_RETURN(mla.v_head_dim, read.positive("v_head_dim", 4096));
  config.num_kv_heads = 1;
  config.head_size = mla.latent_size();
  return Status();
}

// The routed and shared experts of Mixtral, Qwen3-MoE and DeepSeek-V2/V3 as transformers reads
// them (each model's own defaults).
Status read_experts(const ConfigReader& read, const std::string& model_type,
                    ModelConfig& config) {
  MixtureOfExpertsConfig& moe = config.moe;
  TACHYON_ASSIGN_OR_RETURN(moe.experts_per_token, read.positive("num_experts_per_tok", 4096));
  if (model_type == "mixtral") {
    TACHYON_ASSIGN_OR_RETURN(moe.num_experts, read.positive("num_local_experts", 1 << 16));
    moe.expert_ffn_size = config.ffn_size;
    moe.normalize_weights = true;
    return Status();
  }
  if (model_type == "qwen3_moe" || model_type == "qwen2_moe") {
    TACHYON_ASSIGN_OR_RETURN(moe.num_experts, read.positive("num_experts", 1 << 16));
    TACHYON_ASSIGN_OR_RETURN(moe.expert_ffn_size, read.positive("moe_intermediate_size"));
    TACHYON_ASSIGN_OR_RETURN(moe.normalize_weights, read.bool_or("norm_topk_prob", false));
    if (model_type == "qwen2_moe") {
      TACHYON_ASSIGN_OR_RETURN(moe.shared_ffn_size,
                               read.count_or("shared_expert_intermediate_size", 0));
      moe.shared_expert_gated = moe.shared_ffn_size > 0;
    }
    TACHYON_ASSIGN_OR_RETURN(const int sparse_step, read.positive_or("decoder_sparse_step", 1));
    const boost::json::value* dense_only = read.find("mlp_only_layers");
    if (sparse_step != 1 ||
        (dense_only != nullptr && dense_only->is_array() && !dense_only->get_array().empty())) {
      return unsupported("Qwen-MoE with dense layers between the sparse ones "
                         "(decoder_sparse_step, mlp_only_layers) is not supported");
    }
    return Status();
  }
  // DeepSeek-V2 (softmax; greedy or group-limited by the group's best score) and V3 / Kimi-K2
  // (sigmoid; selection bias; groups scored by their best two).
  const bool v3 = model_type != "deepseek_v2";
  TACHYON_ASSIGN_OR_RETURN(moe.num_experts, read.positive("n_routed_experts", 1 << 16));
  TACHYON_ASSIGN_OR_RETURN(moe.expert_ffn_size, read.positive("moe_intermediate_size"));
  TACHYON_ASSIGN_OR_RETURN(const int shared, read.count_or("n_shared_experts", 0, 1 << 10));
  moe.shared_ffn_size = shared * moe.expert_ffn_size;
  TACHYON_ASSIGN_OR_RETURN(moe.first_dense_layers,
                           read.count_or("first_k_dense_replace", v3 ? 3 : 0));
  TACHYON_ASSIGN_OR_RETURN(const int layer_frequency, read.positive_or("moe_layer_freq", 1));
  if (layer_frequency != 1) {
    return unsupported(fmt::format("moe_layer_freq {} (dense layers between MoE layers) is not "
                                   "supported",
                                   layer_frequency));
  }
  TACHYON_ASSIGN_OR_RETURN(moe.normalize_weights, read.bool_or("norm_topk_prob", v3));
  TACHYON_ASSIGN_OR_RETURN(moe.weights_scale, read.number_or("routed_scaling_factor", 1.0));
  moe.scoring = v3 ? ExpertScoring::kSigmoid : ExpertScoring::kSoftmax;
  moe.has_selection_bias = v3;
  moe.group_score = v3 ? ExpertGroupScore::kTopTwoSum : ExpertGroupScore::kMax;
  const std::string method = read.string_or("topk_method", v3 ? "noaux_tc" : "greedy");
  if (v3 || method == "group_limited_greedy") {
    TACHYON_ASSIGN_OR_RETURN(moe.num_groups, read.positive_or("n_group", v3 ? 8 : 1, 1 << 16));
    TACHYON_ASSIGN_OR_RETURN(moe.groups_used,
                             read.positive_or("topk_group", v3 ? 4 : 1, 1 << 16));
  } else if (method != "greedy") {
    return unsupported(fmt::format("DeepSeek-V2 topk_method \"{}\" (greedy, "
                                   "group_limited_greedy)",
                                   method));
  }
  if (!v3 && moe.normalize_weights) {
    // transformers' DeepseekV2 applies no normalisation; neither do the released V2 models.
    return unsupported("DeepSeek-V2 with norm_topk_prob is not supported");
  }
  return Status();
}

}  // namespace

// One RoPE's scaling from config.json's "rope_scaling" (or a "rope_parameters" entry), into
// `rope` (whose freq_base is already read).
Status read_rope_scaling(const boost::json::object& scaling, bool deepseek, ModelConfig& config,
                         RopeConfig& rope) {
  const ConfigReader read_scaling(scaling);
  // transformers reads "rope_type", older configs say "type".
  const boost::json::value* kind = scaling.if_contains("rope_type");
  if (kind == nullptr) kind = scaling.if_contains("type");
  const std::string rope_type =
      kind != nullptr && kind->is_string() ? std::string(kind->get_string()) : "";
  TACHYON_ASSIGN_OR_RETURN(rope.scaling_factor, read_scaling.number_or("factor", 1.0));
  if (!(rope.scaling_factor > 0)) {
    return corrupt_data(fmt::format("RoPE scaling factor is {}, expected > 0",
                                    rope.scaling_factor));
  }
  if (rope_type == "default") {
    rope.scaling = RopeScaling::kNone;
  } else if (rope_type == "linear") {
    rope.scaling = RopeScaling::kLinear;
  } else if (rope_type == "yarn") {
    rope.scaling = RopeScaling::kYarn;
    TACHYON_ASSIGN_OR_RETURN(
        rope.original_context_length,
        read_scaling.positive_or("original_max_position_embeddings", config.context_length));
    TACHYON_ASSIGN_OR_RETURN(rope.yarn_beta_fast, read_scaling.number_or("beta_fast", 32.0));
    TACHYON_ASSIGN_OR_RETURN(rope.yarn_beta_slow, read_scaling.number_or("beta_slow", 1.0));
    // DeepSeek's mscale / mscale_all_dim (transformers' _compute_yarn_parameters and its
    // DeepseekV2/V3 attention): cos and sin times m(mscale) / m(mscale_all_dim), the softmax
    // scale times m(mscale_all_dim)^2, m(x) = 0.1 x ln(factor) + 1 (1 for factor <= 1).
    TACHYON_ASSIGN_OR_RETURN(const double mscale, read_scaling.number_or("mscale", 0.0));
    TACHYON_ASSIGN_OR_RETURN(const double mscale_all_dim,
                             read_scaling.number_or("mscale_all_dim", 0.0));
    auto m = [&](double x) {
      return rope.scaling_factor <= 1 ? 1.0 : 0.1 * x * std::log(rope.scaling_factor) + 1.0;
    };
    if (mscale != 0 && mscale_all_dim != 0) {
      rope.yarn_attention_factor = m(mscale) / m(mscale_all_dim);
    } else if (rope.scaling_factor <= 1) {
      rope.yarn_attention_factor = 1.0;
    }
    if (const boost::json::value* given = scaling.if_contains("attention_factor");
        given != nullptr && given->is_number()) {
      rope.yarn_attention_factor = given->to_number<double>();
    }
    if (deepseek && mscale_all_dim != 0) config.mla.softmax_mscale = mscale_all_dim;
  } else if (rope_type == "llama3") {
    // The frequency factors are computed from these when the weights load (as llama.cpp's
    // converter stores them in rope_freqs.weight).
    rope.scaling = RopeScaling::kLlama3;
    rope.has_frequency_factors = true;
  } else {
    return unsupported(fmt::format("RoPE scaling \"{}\" is not supported (default, linear, yarn, "
                                   "llama3)",
                                   rope_type));
  }
  return Status();
}

// Mistral's "sliding_window" (every layer local; null or absent: none). Qwen2's optional
// window over its upper layers (use_sliding_window) is not supported.
Status read_sliding_window(const ConfigReader& read, const std::string& type,
                           ModelConfig& config) {
  if (type == "mistral" || type == "mixtral") {
    TACHYON_ASSIGN_OR_RETURN(const int window, read.count_or("sliding_window", 0));
    config.set_sliding_window(window);
    return Status();
  }
  TACHYON_ASSIGN_OR_RETURN(const bool qwen_window, read.bool_or("use_sliding_window", false));
  if (qwen_window) {
    return unsupported(fmt::format("{} with \"use_sliding_window\": true is not supported", type));
  }
  return Status();
}

// Gemma 3 (transformers' Gemma3TextConfig): local layers from "layer_types" (else every
// sliding_window_pattern-th layer global, 6), each kind's RoPE from "rope_parameters"
// (transformers 5) or from rope_theta / rope_scaling (global) and rope_local_base_freq (local),
// the softmax scaled by query_pre_attn_scalar, GeGLU, and no soft-capping or bidirectional
// attention (checked).
Status read_gemma3(const ConfigReader& read, ModelConfig& config) {
  config.embedding_scale = std::sqrt(static_cast<float>(config.hidden_size));
  config.post_norms = true;
  const std::string activation = read.string_or("hidden_activation", "gelu_pytorch_tanh");
  if (activation != "gelu_pytorch_tanh") {
    return unsupported(fmt::format("Gemma 3 with hidden_activation \"{}\" is not supported "
                                   "(gelu_pytorch_tanh)",
                                   activation));
  }
  config.ffn_activation = FeedForwardActivation::kGeluTanh;
  TACHYON_ASSIGN_OR_RETURN(config.attention_scale_dim,
                           read.positive_or("query_pre_attn_scalar", 256, 1 << 20));
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    const boost::json::value* value = read.find(key);
    if (value != nullptr && !value->is_null()) {
      return unsupported(fmt::format("Gemma 3 with \"{}\" is not supported", key));
    }
  }
  TACHYON_ASSIGN_OR_RETURN(const bool bidirectional,
                           read.bool_or("use_bidirectional_attention", false));
  if (bidirectional) return unsupported("bidirectional attention (EmbeddingGemma) is not supported");

  TACHYON_ASSIGN_OR_RETURN(const int window, read.positive_or("sliding_window", 4096));
  config.set_sliding_window(window);
  if (const boost::json::value* types = read.find("layer_types");
      types != nullptr && !types->is_null()) {
    if (!types->is_array() || types->get_array().size() != static_cast<size_t>(config.num_layers)) {
      return corrupt_data(fmt::format("config.json \"layer_types\" is not a list of {} layer "
                                      "kinds",
                                      config.num_layers));
    }
    for (int i = 0; i < config.num_layers; ++i) {
      const boost::json::value& kind = types->get_array()[i];
      const bool local = kind.is_string() && kind.get_string() == "sliding_attention";
      if (!local && !(kind.is_string() && kind.get_string() == "full_attention")) {
        return corrupt_data(fmt::format("config.json \"layer_types\"[{}] is {}, expected "
                                        "\"sliding_attention\" or \"full_attention\"",
                                        i, boost::json::serialize(kind)));
      }
      config.local_layers[i] = local;
    }
  } else {
    TACHYON_ASSIGN_OR_RETURN(const int pattern, read.positive_or("sliding_window_pattern", 6));
    for (int i = 0; i < config.num_layers; ++i) config.local_layers[i] = (i + 1) % pattern != 0;
  }

  // RoPE: local layers unscaled at 10000, global ones at 1e6 with any scaling (defaults).
  config.local_rope = config.rope;
  TACHYON_ASSIGN_OR_RETURN(config.rope.freq_base, read.number_or("rope_theta", 1e6));
  TACHYON_ASSIGN_OR_RETURN(config.local_rope.freq_base,
                           read.number_or("rope_local_base_freq", 10000.0));
  if (const boost::json::value* scaling = read.find("rope_scaling");
      scaling != nullptr && !scaling->is_null()) {
    if (!scaling->is_object()) return corrupt_data("config.json \"rope_scaling\" is not an object");
    TACHYON_RETURN_IF_ERROR(read_rope_scaling(scaling->get_object(), false, config, config.rope));
  }
  if (const boost::json::value* parameters = read.find("rope_parameters");
      parameters != nullptr && parameters->is_object()) {
    for (auto [key, rope] : {std::pair<const char*, RopeConfig*>{"full_attention", &config.rope},
                             {"sliding_attention", &config.local_rope}}) {
      const boost::json::value* entry = parameters->get_object().if_contains(key);
      if (entry == nullptr || !entry->is_object()) continue;
      TACHYON_ASSIGN_OR_RETURN(rope->freq_base,
                               ConfigReader(entry->get_object()).number_or("rope_theta",
                                                                           rope->freq_base));
      TACHYON_RETURN_IF_ERROR(read_rope_scaling(entry->get_object(), false, config, *rope));
    }
  }
  if (config.rope.scaling == RopeScaling::kLlama3 || config.local_rope.scaling != RopeScaling::kNone) {
    return unsupported("Gemma 3 takes linear or YaRN scaling on its global layers only");
  }
  return Status();
}

Result<ModelConfig> ModelConfig::from_hf_checkpoint(const HfCheckpoint& checkpoint) {
  return from_hf_config(checkpoint.config());
}

Result<ModelConfig> ModelConfig::from_hf_config(const boost::json::object& json) {
  const ConfigReader read(json);
  ModelConfig config;
  const boost::json::value* model_type = json.if_contains("model_type");
  const std::string type =
      model_type != nullptr && model_type->is_string() ? std::string(model_type->get_string()) : "";
  // Mistral's and Mixtral's models are Llama's architecture under other names; DeepSeek-V2/V3
  // and Kimi-K2 are llama.cpp's deepseek2; Qwen3-MoE its qwen3moe.
  const bool deepseek = type == "deepseek_v2" || type == "deepseek_v3" || type == "kimi_k2";
  const bool gemma = type == "gemma3_text";
  if (type == "gemma3") {
    return unsupported("Gemma 3's multimodal folders (model_type \"gemma3\") are not supported; "
                       "the text-only ones (\"gemma3_text\", e.g. gemma-3-270m, gemma-3-1b) are");
  }
  if (gemma) {
    config.architecture = "gemma3";
  } else if (type == "mistral" || type == "mixtral") {
    config.architecture = "llama";
  } else if (deepseek) {
    config.architecture = "deepseek2";
  } else if (type == "qwen3_moe" || type == "qwen2_moe") {
    config.architecture = type == "qwen3_moe" ? "qwen3moe" : "qwen2moe";
  } else {
    config.architecture = type;
  }
  TACHYON_RETURN_IF_ERROR(config.set_architecture_traits());
  TACHYON_ASSIGN_OR_RETURN(const bool attention_bias, read.bool_or("attention_bias", false));
  if ((config.architecture == "llama" || config.architecture == "deepseek2") && attention_bias) {
    return unsupported(fmt::format("{} models with attention biases are not supported", type));
  }
  TACHYON_ASSIGN_OR_RETURN(config.num_layers, read.positive("num_hidden_layers", 4096));
  TACHYON_ASSIGN_OR_RETURN(config.hidden_size, read.positive("hidden_size"));
  TACHYON_ASSIGN_OR_RETURN(config.ffn_size, read.positive("intermediate_size"));
  TACHYON_ASSIGN_OR_RETURN(config.num_heads, read.positive("num_attention_heads", 4096));
  TACHYON_ASSIGN_OR_RETURN(config.num_kv_heads,
                           read.positive_or("num_key_value_heads", config.num_heads, 4096));
  if (config.num_heads % config.num_kv_heads != 0) {
    return corrupt_data(fmt::format("{} query heads cannot be shared evenly by {} key/value heads",
                                    config.num_heads, config.num_kv_heads));
  }
  if (json.if_contains("head_dim") == nullptr && config.hidden_size % config.num_heads != 0) {
    return corrupt_data(fmt::format("hidden_size {} is not a multiple of {} heads (and no "
                                    "head_dim)",
                                    config.hidden_size, config.num_heads));
  }
  TACHYON_ASSIGN_OR_RETURN(config.head_size,
                           read.positive_or("head_dim", config.hidden_size / config.num_heads, 4096));
  if (deepseek) {
    // Their head_dim (if any) is the rotary part's; the attention runs over the latent.
    TACHYON_RETURN_IF_ERROR(read_latent_attention(read, config));
  }
  if (!config.mla.enabled() && config.head_size % 2 != 0) {
    return corrupt_data(fmt::format("head size {} is odd; RoPE needs pairs", config.head_size));
  }
  TACHYON_ASSIGN_OR_RETURN(config.vocab_size, read.positive("vocab_size", 1 << 24));
  TACHYON_ASSIGN_OR_RETURN(config.context_length, read.positive("max_position_embeddings"));
  TACHYON_ASSIGN_OR_RETURN(const double epsilon, read.number_or("rms_norm_eps", 1e-6));
  config.rms_norm_epsilon = static_cast<float>(epsilon);
  // Gemma ties its embeddings unless it says otherwise.
  TACHYON_ASSIGN_OR_RETURN(config.tied_embeddings, read.bool_or("tie_word_embeddings", gemma));

  if (deepseek || type == "mixtral" || type == "qwen3_moe" || type == "qwen2_moe") {
    TACHYON_RETURN_IF_ERROR(read_experts(read, type, config));
  }
  if (deepseek) {
    TACHYON_ASSIGN_OR_RETURN(config.num_mtp_layers, read.count_or("num_nextn_predict_layers", 0, 16));
  }

  RopeConfig& rope = config.rope;
  rope.dimensions = deepseek ? config.mla.qk_rope_head_dim : config.head_size;
  if (gemma) {
    TACHYON_RETURN_IF_ERROR(read_gemma3(read, config));
  } else {
    TACHYON_ASSIGN_OR_RETURN(rope.freq_base, read.number_or("rope_theta", 10000.0));
    const boost::json::value* scaling_value = json.if_contains("rope_scaling");
    if (scaling_value != nullptr && !scaling_value->is_null()) {
      if (!scaling_value->is_object()) {
        return corrupt_data(fmt::format("config.json \"rope_scaling\" is {}, not an object",
                                        boost::json::serialize(*scaling_value)));
      }
      TACHYON_RETURN_IF_ERROR(read_rope_scaling(scaling_value->get_object(), deepseek, config,
                                                rope));
    }
    config.local_rope = rope;
    TACHYON_RETURN_IF_ERROR(read_sliding_window(read, type, config));
  }
  TACHYON_RETURN_IF_ERROR(config.validate_attention_and_experts());
  return config;
}

Result<std::vector<float>> llama3_frequency_factors(const HfCheckpoint& checkpoint,
                                                    const ModelConfig& config) {
  const boost::json::object& scaling = checkpoint.config().at("rope_scaling").as_object();
  const ConfigReader read(scaling);
  TACHYON_ASSIGN_OR_RETURN(const double factor, read.number_or("factor", 1.0));
  TACHYON_ASSIGN_OR_RETURN(const double low, read.number_or("low_freq_factor", 1.0));
  TACHYON_ASSIGN_OR_RETURN(const double high, read.number_or("high_freq_factor", 4.0));
  TACHYON_ASSIGN_OR_RETURN(const int original,
                           read.positive_or("original_max_position_embeddings", 8192));
  if (!(high > low)) {
    return corrupt_data(fmt::format("llama3 RoPE scaling: high_freq_factor {} is not above "
                                    "low_freq_factor {}",
                                    high, low));
  }
  // Per rotated pair j, in double as llama.cpp's converter computes it: 1 for wavelengths
  // shorter than original / high, `factor` for longer than original / low, and in between
  // 1 / ((1 - s) / factor + s), s = (original / wavelength - low) / (high - low).
  const int dim = config.head_size;
  std::vector<float> factors;
  for (int i = 0; i < dim; i += 2) {
    const double inverse_frequency = 1.0 / std::pow(config.rope.freq_base,
                                                    static_cast<double>(i) / dim);
    const double wavelength = 2.0 * std::numbers::pi / inverse_frequency;
    double value;
    if (wavelength < original / high) {
      value = 1.0;
    } else if (wavelength > original / low) {
      value = factor;
    } else {
      const double smooth = (original / wavelength - low) / (high - low);
      value = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    factors.push_back(static_cast<float>(value));
  }
  return factors;
}

}  // namespace tachyon
