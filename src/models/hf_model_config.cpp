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
  Result<bool> bool_or(std::string_view key, bool fallback) const {
    const boost::json::value* value = config_.if_contains(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_bool()) {
      return corrupt_data(fmt::format("config.json \"{}\" is {}, not true or false", key,
                                      boost::json::serialize(*value)));
    }
    return value->get_bool();
  }

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

}  // namespace

Result<ModelConfig> ModelConfig::from_hf_checkpoint(const HfCheckpoint& checkpoint) {
  const boost::json::object& json = checkpoint.config();
  const ConfigReader read(json);
  ModelConfig config;
  const boost::json::value* model_type = json.if_contains("model_type");
  const std::string type =
      model_type != nullptr && model_type->is_string() ? std::string(model_type->get_string()) : "";
  // Mistral's dense models are Llama's architecture under another name.
  config.architecture = type == "mistral" ? "llama" : type;
  TACHYON_RETURN_IF_ERROR(config.set_architecture_traits());
  TACHYON_ASSIGN_OR_RETURN(const bool attention_bias, read.bool_or("attention_bias", false));
  if (config.architecture == "llama" && attention_bias) {
    return unsupported("Llama-architecture models with attention biases are not supported");
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
  if (config.head_size % 2 != 0) {
    return corrupt_data(fmt::format("head size {} is odd; RoPE needs pairs", config.head_size));
  }
  TACHYON_ASSIGN_OR_RETURN(config.vocab_size, read.positive("vocab_size", 1 << 24));
  TACHYON_ASSIGN_OR_RETURN(config.context_length, read.positive("max_position_embeddings"));
  TACHYON_ASSIGN_OR_RETURN(const double epsilon, read.number_or("rms_norm_eps", 1e-6));
  config.rms_norm_epsilon = static_cast<float>(epsilon);
  TACHYON_ASSIGN_OR_RETURN(config.tied_embeddings, read.bool_or("tie_word_embeddings", false));

  RopeConfig& rope = config.rope;
  rope.dimensions = config.head_size;
  TACHYON_ASSIGN_OR_RETURN(rope.freq_base, read.number_or("rope_theta", 10000.0));
  const boost::json::value* scaling_value = json.if_contains("rope_scaling");
  if (scaling_value != nullptr && !scaling_value->is_null()) {
    if (!scaling_value->is_object()) {
      return corrupt_data(fmt::format("config.json \"rope_scaling\" is {}, not an object",
                                      boost::json::serialize(*scaling_value)));
    }
    const boost::json::object& scaling = scaling_value->get_object();
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
  }
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
