// What `tachyon info` shows about a model, read from GGUF metadata and tensor infos.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model_files/gguf_file.h"

namespace tachyon {

struct SpecialToken {
  std::string role;  // "bos", "eos", "eot", "unknown", "padding", ...
  uint64_t id = 0;
  std::string text;  // empty when the id is outside the vocabulary
};

struct ModelSummary {
  std::string architecture;
  std::string name;
  uint32_t gguf_version = 0;
  uint64_t file_bytes = 0;
  uint64_t num_parameters = 0;
  uint64_t num_tensor_bytes = 0;
  std::optional<uint64_t> num_layers;
  std::optional<uint64_t> embedding_size;
  std::optional<uint64_t> feed_forward_size;
  std::optional<uint64_t> num_heads;
  std::optional<uint64_t> num_kv_heads;
  std::optional<uint64_t> head_size;
  std::optional<uint64_t> context_length;
  std::optional<uint64_t> num_experts;
  std::optional<uint64_t> num_experts_used;
  std::optional<double> rms_norm_epsilon;
  std::optional<double> rope_freq_base;
  std::optional<uint64_t> rope_dimensions;
  std::optional<std::string> rope_scaling_type;
  std::optional<double> rope_scaling_factor;
  std::optional<uint64_t> rope_original_context;
  std::map<std::string, uint64_t> tensor_type_counts;  // dtype name -> number of tensors
  std::string tokenizer_model;                          // "gpt2", "llama", ... or empty
  std::string tokenizer_pre;
  uint64_t vocabulary_size = 0;
  uint64_t num_merges = 0;
  std::vector<SpecialToken> special_tokens;
  bool add_bos = false;
  bool has_chat_template = false;
};

ModelSummary summarize_model(const GgufFile& file);

}  // namespace tachyon
