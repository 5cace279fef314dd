#include "cli/model_path.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "core/paths.h"

namespace tachyon::cli {
namespace {

namespace fs = std::filesystem;

Status with_path(const std::string& path, const Status& status) {
  return Status(status.code(), path + ": " + status.message());
}

// A file of the folder, or nothing when it does not exist.
Result<std::optional<std::string>> read_optional(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("cannot read {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return std::optional<std::string>(text.str());
}

// tokenizer_config.json as an object (empty when the folder has none).
Result<boost::json::object> tokenizer_config(const std::string& dir) {
  TACHYON_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           read_optional(fs::path(dir) / "tokenizer_config.json"));
  if (!text) return boost::json::object();
  boost::json::error_code error;
  boost::json::value value = boost::json::parse(*text, error);
  if (error || !value.is_object()) {
    return corrupt_data("tokenizer_config.json is not a JSON object" +
                        (error ? ": " + error.message() : std::string()));
  }
  return std::move(value.get_object());
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> ModelFiles::load_tokenizer() const {
  Result<std::unique_ptr<Tokenizer>> tokenizer = [&]() -> Result<std::unique_ptr<Tokenizer>> {
    if (gguf) return Tokenizer::from_gguf(*gguf);
    TACHYON_ASSIGN_OR_RETURN(std::optional<std::string> json,
                             read_optional(fs::path(path) / "tokenizer.json"));
    TACHYON_ASSIGN_OR_RETURN(std::optional<std::string> config,
                             read_optional(fs::path(path) / "tokenizer_config.json"));
    if (!json) {
      // Kimi-K2 ships tiktoken ranks instead.
      TACHYON_ASSIGN_OR_RETURN(std::optional<std::string> ranks,
                               read_optional(fs::path(path) / "tiktoken.model"));
      if (ranks && config) {
        TACHYON_ASSIGN_OR_RETURN(Vocabulary vocabulary, Vocabulary::from_tiktoken(*ranks, *config));
        return Tokenizer::from_vocabulary(std::move(vocabulary));
      }
      if (ranks) return not_found("tiktoken.model without tokenizer_config.json");
      return not_found("no tokenizer.json (tachyon reads Hugging Face tokenizers from it, or "
                       "Kimi's tiktoken.model)");
    }
    std::optional<std::string_view> config_view;
    if (config) config_view = *config;
    TACHYON_ASSIGN_OR_RETURN(Vocabulary vocabulary, Vocabulary::from_hf_tokenizer(*json, config_view));
    return Tokenizer::from_vocabulary(std::move(vocabulary));
  }();
  if (!tokenizer.ok()) return with_path(path, tokenizer.status());
  return tokenizer;
}

Result<ModelConfig> ModelFiles::config() const {
  Result<ModelConfig> config =
      gguf ? ModelConfig::from_gguf(*gguf) : ModelConfig::from_hf_checkpoint(*checkpoint);
  if (!config.ok()) return with_path(path, config.status());
  return config;
}

Result<std::unique_ptr<DecoderModel>> ModelFiles::load_model(
    std::optional<DType> quantize, const MemoryAmount& experts_memory,
    const ModelShard* shard) const {
  if (!gguf && !experts_memory.empty()) {
    return invalid_argument(path + ": --experts-mem reads experts from a GGUF file; convert the "
                            "folder first (llama.cpp's convert_hf_to_gguf.py)");
  }
  Result<std::unique_ptr<DecoderModel>> model =
      gguf ? DecoderModel::load(*gguf, quantize, experts_memory, shard)
           : DecoderModel::load(*checkpoint, quantize, shard);
  if (!model.ok()) return with_path(path, model.status());
  return model;
}

Result<std::string> ModelFiles::chat_template_source() const {
  if (gguf) {
    std::optional<std::string> source = gguf->get_string("tokenizer.chat_template");
    if (!source) return not_found(path + " has no chat template (tokenizer.chat_template)");
    return std::move(*source);
  }
  Result<boost::json::object> config = tokenizer_config(path);
  if (!config.ok()) return with_path(path, config.status());
  if (const boost::json::value* value = config->if_contains("chat_template")) {
    if (value->is_string()) return std::string(value->get_string());
    if (value->is_array()) {  // [{"name": ..., "template": ...}, ...]: the default one
      for (const boost::json::value& entry : value->get_array()) {
        const boost::json::object* named = entry.if_object();
        if (named != nullptr && named->if_contains("name") != nullptr &&
            named->at("name") == "default" && named->if_contains("template") != nullptr &&
            named->at("template").is_string()) {
          return std::string(named->at("template").get_string());
        }
      }
    }
    return with_path(path, corrupt_data("tokenizer_config.json chat_template is neither a string "
                                        "nor a list with a \"default\" template"));
  }
  Result<std::optional<std::string>> file = read_optional(fs::path(path) / "chat_template.jinja");
  if (!file.ok()) return file.status();
  if (*file) return std::move(**file);
  return not_found(path + " has no chat template (tokenizer_config.json chat_template or "
                          "chat_template.jinja)");
}

std::string ModelFiles::special_token_text(std::string_view which) const {
  if (gguf) {
    const std::optional<uint64_t> id =
        gguf->get_uint(fmt::format("tokenizer.ggml.{}_id", which));
    const GgufValue* tokens = gguf->find("tokenizer.ggml.tokens");
    if (!id || tokens == nullptr || tokens->as_array() == nullptr) return "";
    const GgufArray& array = *tokens->as_array();
    if (*id >= array.size() || array[*id].as_string() == nullptr) return "";
    return *array[*id].as_string();
  }
  Result<boost::json::object> config = tokenizer_config(path);
  if (!config.ok()) return "";
  const boost::json::value* value = config->if_contains(which);
  if (value == nullptr) return "";
  if (value->is_string()) return std::string(value->get_string());
  if (value->is_object() && value->get_object().if_contains("content") != nullptr &&
      value->get_object().at("content").is_string()) {
    return std::string(value->get_object().at("content").get_string());
  }
  return "";
}

Result<ModelFiles> open_model(const std::string& path) {
  ModelFiles files;
  files.path = path;
  if (path.empty()) {
    files.path = default_model_path();
    std::error_code error;
    if (!fs::exists(files.path, error)) {
      return not_found("no model given (-m MODEL) and the default model is not installed at " +
                       files.path + "; run `make setup` (or scripts/fetch_model.sh) to fetch it");
    }
  }
  std::error_code error;
  if (fs::is_directory(files.path, error)) {
    TACHYON_ASSIGN_OR_RETURN(files.checkpoint, HfCheckpoint::open(files.path));
    return files;
  }
  TACHYON_ASSIGN_OR_RETURN(files.gguf, GgufFile::open(files.path));
  return files;
}

void add_model_option(CLI::App& command, std::string& model_path) {
  command.add_option("-m,--model", model_path,
                     "GGUF model file or Hugging Face model folder (default: " +
                         default_model_path() + ")");
}

}  // namespace tachyon::cli
