// Where models are found: -m/--model (a GGUF file or a Hugging Face folder), else the default
// model installed by scripts/setup.sh.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "model_files/gguf_file.h"
#include "model_files/hf_checkpoint.h"
#include "models/decoder_model.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {

// A model as -m names it: a GGUF file, or a Hugging Face folder (config.json, safetensors,
// tokenizer.json, tokenizer_config.json, chat_template.jinja). Exactly one of the two is set.
struct ModelFiles {
  std::string path;
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<HfCheckpoint> checkpoint;

  // Each error names the path.
  Result<std::unique_ptr<Tokenizer>> load_tokenizer() const;
  // `quantize`: float matrices quantized at load (--quantize); `experts_memory`: --experts-mem
  // (GGUF files only).
  // `shard`: this process's part of a model split over several (null: all of it).
  Result<std::unique_ptr<DecoderModel>> load_model(std::optional<DType> quantize = std::nullopt,
                                                   const MemoryAmount& experts_memory = {},
                                                   const ModelShard* shard = nullptr) const;
  // The model's shape, without its weights.
  Result<ModelConfig> config() const;
  // The chat template's source: GGUF's tokenizer.chat_template, or tokenizer_config.json's
  // chat_template (a string, or the entry named "default" of a list) or chat_template.jinja.
  Result<std::string> chat_template_source() const;
  // The text of the BOS or EOS token ("bos_token", "eos_token"), or empty when there is none.
  std::string special_token_text(std::string_view which) const;
};

// Opens `path`, or the default model when `path` is empty, with a message that says what to do
// when the default model is missing.
Result<ModelFiles> open_model(const std::string& path);

// Adds the standard -m/--model option.
void add_model_option(CLI::App& command, std::string& model_path);

}  // namespace tachyon::cli
