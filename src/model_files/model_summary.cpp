#include "model_files/model_summary.h"

namespace tachyon {
namespace {

std::optional<uint64_t> arch_uint(const GgufFile& file, const std::string& arch,
                                  const std::string& key) {
  return file.get_uint(arch + "." + key);
}

std::optional<double> arch_float(const GgufFile& file, const std::string& arch,
                                 const std::string& key) {
  return file.get_float(arch + "." + key);
}

}  // namespace

ModelSummary summarize_model(const GgufFile& file) {
  ModelSummary summary;
  summary.architecture = file.get_string("general.architecture").value_or("");
  summary.name = file.get_string("general.name").value_or("");
  summary.gguf_version = file.version();
  summary.file_bytes = file.file_size();
  for (const GgufTensorInfo& tensor : file.tensors()) {
    summary.num_parameters += tensor.num_elements;
    summary.num_tensor_bytes += tensor.num_bytes;
    ++summary.tensor_type_counts[std::string(dtype_name(tensor.type))];
  }

  const std::string& arch = summary.architecture;
  summary.num_layers = arch_uint(file, arch, "block_count");
  summary.embedding_size = arch_uint(file, arch, "embedding_length");
  summary.feed_forward_size = arch_uint(file, arch, "feed_forward_length");
  summary.num_heads = arch_uint(file, arch, "attention.head_count");
  summary.num_kv_heads = arch_uint(file, arch, "attention.head_count_kv");
  if (!summary.num_kv_heads) summary.num_kv_heads = summary.num_heads;
  summary.head_size = arch_uint(file, arch, "attention.key_length");
  if (!summary.head_size && summary.embedding_size && summary.num_heads && *summary.num_heads) {
    summary.head_size = *summary.embedding_size / *summary.num_heads;
  }
  summary.context_length = arch_uint(file, arch, "context_length");
  summary.num_experts = arch_uint(file, arch, "expert_count");
  summary.num_experts_used = arch_uint(file, arch, "expert_used_count");
  summary.rms_norm_epsilon = arch_float(file, arch, "attention.layer_norm_rms_epsilon");
  summary.rope_freq_base = arch_float(file, arch, "rope.freq_base");
  summary.rope_dimensions = arch_uint(file, arch, "rope.dimension_count");
  summary.rope_scaling_type = file.get_string(arch + ".rope.scaling.type");
  summary.rope_scaling_factor = arch_float(file, arch, "rope.scaling.factor");
  summary.rope_original_context = arch_uint(file, arch, "rope.scaling.original_context_length");

  summary.tokenizer_model = file.get_string("tokenizer.ggml.model").value_or("");
  summary.tokenizer_pre = file.get_string("tokenizer.ggml.pre").value_or("");
  const GgufArray* tokens = nullptr;
  if (const GgufValue* value = file.find("tokenizer.ggml.tokens")) tokens = value->as_array();
  if (tokens) summary.vocabulary_size = tokens->size();
  if (const GgufValue* merges = file.find("tokenizer.ggml.merges"); merges && merges->as_array()) {
    summary.num_merges = merges->as_array()->size();
  }
  static const std::pair<const char*, const char*> kSpecialKeys[] = {
      {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
      {"eot", "tokenizer.ggml.eot_token_id"},       {"eom", "tokenizer.ggml.eom_token_id"},
      {"unknown", "tokenizer.ggml.unknown_token_id"}, {"padding", "tokenizer.ggml.padding_token_id"},
      {"separator", "tokenizer.ggml.seperator_token_id"},
  };
  for (const auto& [role, key] : kSpecialKeys) {
    const std::optional<uint64_t> id = file.get_uint(key);
    if (!id) continue;
    SpecialToken token{role, *id, ""};
    if (tokens && *id < tokens->size()) {
      if (const std::string* text = (*tokens)[*id].as_string()) token.text = *text;
    }
    summary.special_tokens.push_back(std::move(token));
  }
  summary.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  summary.has_chat_template = file.get_string("tokenizer.chat_template").has_value();
  return summary;
}

}  // namespace tachyon
