#include "tokenizer/vocabulary.h"

#include <fmt/format.h>

namespace tachyon {
namespace {

Result<const GgufArray*> get_array(const GgufFile& file, const char* key, GgufValueType element,
                                   bool required) {
  const GgufValue* value = file.find(key);
  if (!value) {
    if (required) return corrupt_data(fmt::format("tokenizer metadata '{}' is missing", key));
    return static_cast<const GgufArray*>(nullptr);
  }
  if (!value->is_array() || value->element_type() != element) {
    return corrupt_data(fmt::format("tokenizer metadata '{}' is {}, expected an array of {}", key,
                                    value->is_array() ? "an array of another type"
                                                      : gguf_value_type_name(value->type()),
                                    gguf_value_type_name(element)));
  }
  return value->as_array();
}

Result<std::optional<TokenId>> get_token_id(const GgufFile& file, const char* key,
                                            int32_t vocabulary_size) {
  const GgufValue* value = file.find(key);
  if (!value) return std::optional<TokenId>();
  const std::optional<int64_t> id = value->as_int();
  // -1 (as int32 or wrapped to uint32) conventionally means "none".
  if (id && (*id == -1 || *id == 0xffffffff)) return std::optional<TokenId>();
  if (!id || *id < 0 || *id >= vocabulary_size) {
    return corrupt_data(fmt::format("tokenizer metadata '{}' is {}, outside the vocabulary of {} "
                                    "tokens",
                                    key, value->to_display_string(), vocabulary_size));
  }
  return std::optional<TokenId>(static_cast<TokenId>(*id));
}

}  // namespace

Result<Vocabulary> Vocabulary::from_gguf(const GgufFile& file) {
  Vocabulary vocabulary;
  const std::optional<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model) return corrupt_data("the model has no tokenizer: 'tokenizer.ggml.model' is missing");
  vocabulary.model = *model;
  vocabulary.pre = file.get_string("tokenizer.ggml.pre").value_or("default");

  TACHYON_ASSIGN_OR_RETURN(const GgufArray* tokens,
                           get_array(file, "tokenizer.ggml.tokens", GgufValueType::kString, true));
  if (tokens->empty() || tokens->size() > static_cast<uint64_t>(kMaxSize)) {
    return corrupt_data(fmt::format("tokenizer.ggml.tokens has {} entries, expected 1..{}",
                                    tokens->size(), kMaxSize));
  }
  const int32_t size = static_cast<int32_t>(tokens->size());
  vocabulary.tokens.reserve(size);
  vocabulary.token_to_id.reserve(size);
  for (int32_t id = 0; id < size; ++id) {
    vocabulary.tokens.push_back(*(*tokens)[id].as_string());
    // The first id wins when a text repeats, as in llama.cpp and HF.
    vocabulary.token_to_id.emplace(vocabulary.tokens.back(), id);
  }

  TACHYON_ASSIGN_OR_RETURN(const GgufArray* scores,
                           get_array(file, "tokenizer.ggml.scores", GgufValueType::kFloat32, false));
  if (scores) {
    if (scores->size() != tokens->size()) {
      return corrupt_data(fmt::format("tokenizer.ggml.scores has {} entries but there are {} tokens",
                                      scores->size(), tokens->size()));
    }
    for (const GgufValue& score : *scores) {
      vocabulary.scores.push_back(static_cast<float>(*score.as_float()));
    }
  }

  const GgufValue* types_value = file.find("tokenizer.ggml.token_type");
  if (types_value) {
    const GgufArray* types = types_value->as_array();
    if (!types || !(types_value->element_type() == GgufValueType::kInt32 ||
                    types_value->element_type() == GgufValueType::kUint32)) {
      return corrupt_data("tokenizer.ggml.token_type is not an array of int32");
    }
    if (types->size() != tokens->size()) {
      return corrupt_data(fmt::format(
          "tokenizer.ggml.token_type has {} entries but there are {} tokens", types->size(),
          tokens->size()));
    }
    for (size_t id = 0; id < types->size(); ++id) {
      const std::optional<int64_t> type = (*types)[id].as_int();
      if (!type || *type < 0 || *type > static_cast<int64_t>(TokenType::kByte)) {
        return corrupt_data(fmt::format("tokenizer.ggml.token_type[{}] is {}, expected 0..6", id,
                                        (*types)[id].to_display_string()));
      }
      vocabulary.types.push_back(static_cast<TokenType>(*type));
    }
  } else {
    vocabulary.types.assign(size, TokenType::kNormal);
  }

  TACHYON_ASSIGN_OR_RETURN(const GgufArray* merges,
                           get_array(file, "tokenizer.ggml.merges", GgufValueType::kString, false));
  if (merges) {
    vocabulary.merges.reserve(merges->size());
    for (const GgufValue& merge : *merges) vocabulary.merges.push_back(*merge.as_string());
  }

  TACHYON_ASSIGN_OR_RETURN(vocabulary.bos_id,
                           get_token_id(file, "tokenizer.ggml.bos_token_id", size));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.eos_id,
                           get_token_id(file, "tokenizer.ggml.eos_token_id", size));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.eot_id,
                           get_token_id(file, "tokenizer.ggml.eot_token_id", size));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.eom_id,
                           get_token_id(file, "tokenizer.ggml.eom_token_id", size));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.unknown_id,
                           get_token_id(file, "tokenizer.ggml.unknown_token_id", size));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.padding_id,
                           get_token_id(file, "tokenizer.ggml.padding_token_id", size));
  const bool is_sentencepiece = vocabulary.model == "llama";
  vocabulary.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(is_sentencepiece);
  vocabulary.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  vocabulary.add_space_prefix =
      file.get_bool("tokenizer.ggml.add_space_prefix").value_or(is_sentencepiece);
  return vocabulary;
}

}  // namespace tachyon
