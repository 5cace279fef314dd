#include "models/model_config.h"

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
                                 "qwen3",
                                 architecture));
}

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig config;
  const std::optional<std::string> architecture = file.get_string("general.architecture");
  if (!architecture) return corrupt_data("model metadata 'general.architecture' is missing");
  config.architecture = *architecture;
  TACHYON_RETURN_IF_ERROR(config.set_architecture_traits());

  const MetadataReader meta(file, config.architecture + ".");
  TACHYON_ASSIGN_OR_RETURN(config.num_layers, meta.positive("block_count", 4096));
  TACHYON_ASSIGN_OR_RETURN(config.hidden_size, meta.positive("embedding_length"));
  TACHYON_ASSIGN_OR_RETURN(config.ffn_size, meta.positive("feed_forward_length"));
  TACHYON_ASSIGN_OR_RETURN(config.num_heads, meta.positive("attention.head_count", 4096));
  config.num_kv_heads = config.num_heads;
  if (meta.optional_uint("attention.head_count_kv")) {
    TACHYON_ASSIGN_OR_RETURN(config.num_kv_heads, meta.positive("attention.head_count_kv", 4096));
  }
  if (config.num_heads % config.num_kv_heads != 0) {
    return corrupt_data(fmt::format("{} query heads cannot be shared evenly by {} key/value heads",
                                    config.num_heads, config.num_kv_heads));
  }
  if (meta.optional_uint("attention.key_length")) {
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
  if (config.head_size % 2 != 0) {
    return corrupt_data(fmt::format("head size {} is odd; RoPE needs pairs", config.head_size));
  }
  TACHYON_ASSIGN_OR_RETURN(config.context_length, meta.positive("context_length", 1 << 24));
  config.rms_norm_epsilon =
      static_cast<float>(meta.optional_float("attention.layer_norm_rms_epsilon").value_or(1e-5));

  RopeConfig& rope = config.rope;
  rope.dimensions = static_cast<int>(meta.optional_uint("rope.dimension_count").value_or(config.head_size));
  if (rope.dimensions != config.head_size) {
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

  const GgufTensorInfo* embedding = file.find_tensor("token_embd.weight");
  if (!embedding) return corrupt_data("tensor 'token_embd.weight' is missing");
  if (embedding->shape.size() != 2 || embedding->shape[0] != config.hidden_size) {
    return corrupt_data(fmt::format("tensor 'token_embd.weight' has shape [{}], expected [{}, vocab]",
                                    fmt::join(embedding->shape, ", "), config.hidden_size));
  }
  config.vocab_size = static_cast<int>(embedding->shape[1]);
  return config;
}

}  // namespace tachyon
