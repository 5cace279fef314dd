// Vocabulary from a Hugging Face tokenizer.json (and tokenizer_config.json): byte-level BPE
// vocabularies, their pre-tokenizer recognised as one of the known families.
#include <cctype>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {
namespace {

std::string shown(const boost::json::value& value) {
  std::string text = boost::json::serialize(value);
  return text.size() > 120 ? text.substr(0, 120) + "..." : text;
}

// The regex stages a pre_tokenizer applies, in order (see PreTokenizer::name_for_stages).
Status collect_stages(const boost::json::value& node, std::vector<std::string>& stages) {
  if (node.is_null()) return Status();
  const boost::json::object* object = node.if_object();
  const boost::json::value* type = object ? object->if_contains("type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return unsupported(fmt::format("tokenizer.json pre_tokenizer {} has no type", shown(node)));
  }
  const std::string_view kind = type->get_string();
  auto flag = [&](std::string_view key) {
    const boost::json::value* value = object->if_contains(key);
    return value != nullptr && value->is_bool() && value->get_bool();
  };
  if (kind == "Sequence") {
    const boost::json::value* children = object->if_contains("pretokenizers");
    if (children == nullptr || !children->is_array()) {
      return corrupt_data("tokenizer.json pre_tokenizer Sequence has no pretokenizers array");
    }
    for (const boost::json::value& child : children->get_array()) {
      TACHYON_RETURN_IF_ERROR(collect_stages(child, stages));
    }
    return Status();
  }
  if (kind == "ByteLevel") {
    if (flag("add_prefix_space")) {
      return unsupported("tokenizer.json ByteLevel pre-tokenizer with add_prefix_space");
    }
    if (flag("use_regex")) stages.push_back(PreTokenizer::byte_level_pattern());
    return Status();
  }
  if (kind == "Digits" && flag("individual_digits")) {
    stages.push_back(PreTokenizer::single_digit_pattern());
    return Status();
  }
  if (kind == "Split") {
    const boost::json::value* pattern = object->if_contains("pattern");
    const boost::json::value* regex =
        pattern && pattern->is_object() ? pattern->get_object().if_contains("Regex") : nullptr;
    const boost::json::value* behavior = object->if_contains("behavior");
    if (regex == nullptr || !regex->is_string() || behavior == nullptr ||
        !behavior->is_string() || behavior->get_string() != "Isolated" || flag("invert")) {
      return unsupported(fmt::format("tokenizer.json Split pre-tokenizer {} (tachyon knows "
                                     "isolated regex splits)",
                                     shown(node)));
    }
    stages.emplace_back(regex->get_string());
    return Status();
  }
  return unsupported(fmt::format("tokenizer.json pre-tokenizer {} is not supported", shown(node)));
}

// A special token named in tokenizer_config.json: a string, or {"content": ...}.
std::optional<std::string> special_token_text(const boost::json::object& config,
                                              std::string_view key) {
  const boost::json::value* value = config.if_contains(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_string()) return std::string(value->get_string());
  if (value->is_object()) {
    const boost::json::value* content = value->get_object().if_contains("content");
    if (content != nullptr && content->is_string()) return std::string(content->get_string());
  }
  return std::nullopt;
}

// The pre-tokenizer of a byte-level BPE, recognised by its regexes and flags.
Status set_byte_level_pre_tokenizer(const boost::json::object& tokenizer,
                                    const boost::json::object& model, Vocabulary& vocabulary) {
  std::vector<std::string> stages;
  if (const boost::json::value* pre = tokenizer.if_contains("pre_tokenizer")) {
    TACHYON_RETURN_IF_ERROR(collect_stages(*pre, stages));
  }
  const boost::json::value* ignore_merges = model.if_contains("ignore_merges");
  const boost::json::value* normalizer = tokenizer.if_contains("normalizer");
  const bool nfc = normalizer != nullptr && normalizer->is_object() &&
                   normalizer->get_object().if_contains("type") != nullptr &&
                   normalizer->get_object().at("type") == "NFC";
  if (normalizer != nullptr && !normalizer->is_null() && !nfc) {
    return unsupported(fmt::format("tokenizer.json normalizer {} is not supported (none or NFC)",
                                   shown(*normalizer)));
  }
  const std::optional<std::string> pre = PreTokenizer::name_for_stages(
      stages, ignore_merges != nullptr && ignore_merges->is_bool() && ignore_merges->get_bool(),
      nfc);
  if (!pre) {
    std::string listed;
    for (const std::string& stage : stages) listed += (listed.empty() ? "" : " then ") + stage;
    return unsupported(fmt::format("tokenizer.json's pre-tokenizer ({}) is none of the known "
                                   "families ({})",
                                   listed.empty() ? "no regex" : listed,
                                   fmt::join(PreTokenizer::known_names(), ", ")));
  }
  vocabulary.pre = *pre;
  return Status();
}

// A SentencePiece-style BPE: the normalizer that turns spaces into "▁" with one in front
// (transformers' LlamaConverter), token types (<0xXX> bytes, the unknown token, added tokens)
// and scores from the merges: a piece scores minus the rank of the first merge that makes it,
// so that merging by highest score takes the pairs merge-rank BPE takes.
Status set_sentencepiece_fields(const boost::json::object& tokenizer,
                                const boost::json::object& model, Vocabulary& vocabulary) {
  const boost::json::value* normalizer = tokenizer.if_contains("normalizer");
  const boost::json::value* pre = tokenizer.if_contains("pre_tokenizer");
  const std::string expected =
      R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
      R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})";
  if (normalizer == nullptr || *normalizer != boost::json::parse(expected) ||
      (pre != nullptr && !pre->is_null())) {
    return unsupported(fmt::format("tokenizer.json SentencePiece-style BPE with normalizer {} "
                                   "and pre_tokenizer {} (tachyon takes Prepend(\"▁\") + "
                                   "Replace(\" \", \"▁\") and no pre-tokenizer)",
                                   normalizer ? shown(*normalizer) : "none",
                                   pre ? shown(*pre) : "none"));
  }
  vocabulary.add_space_prefix = true;
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    const std::string& text = vocabulary.tokens[id];
    if (text.size() == 6 && text.starts_with("<0x") && text.ends_with(">") &&
        std::isxdigit(static_cast<unsigned char>(text[3])) &&
        std::isxdigit(static_cast<unsigned char>(text[4]))) {
      vocabulary.types[id] = TokenType::kByte;
    }
  }
  if (const boost::json::value* unknown = model.if_contains("unk_token");
      unknown != nullptr && unknown->is_string()) {
    const std::optional<TokenId> id = vocabulary.find(std::string(unknown->get_string()));
    if (!id) {
      return corrupt_data(fmt::format("tokenizer.json unk_token {} is not in the vocabulary",
                                      shown(*unknown)));
    }
    vocabulary.unknown_id = *id;
    vocabulary.types[*id] = TokenType::kUnknown;
  }
  vocabulary.scores.assign(vocabulary.size(), 0.0f);
  std::vector<bool> scored(vocabulary.size(), false);
  for (size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const std::string& merge = vocabulary.merges[rank];
    const size_t space = merge.find(' ');
    if (space == std::string::npos) continue;
    const std::optional<TokenId> piece =
        vocabulary.find(merge.substr(0, space) + merge.substr(space + 1));
    if (piece && !scored[*piece]) {
      scored[*piece] = true;
      vocabulary.scores[*piece] = -static_cast<float>(rank);
    }
  }
  vocabulary.merges.clear();  // SentencePiece merges by score
  return Status();
}

}  // namespace

Result<boost::json::object> parse_json_object(std::string_view text, std::string_view what) {
  boost::json::error_code error;
  boost::json::value value = boost::json::parse(text, error);
  if (error) return corrupt_data(fmt::format("{} is not valid JSON: {}", what, error.message()));
  if (!value.is_object()) return corrupt_data(fmt::format("{} is not a JSON object", what));
  return std::move(value.get_object());
}

Status apply_tokenizer_config(const boost::json::object& config, Vocabulary& vocabulary) {
  auto id_of = [&](std::string_view key) -> Result<std::optional<TokenId>> {
    const std::optional<std::string> text = special_token_text(config, key);
    if (!text) return std::optional<TokenId>();
    const std::optional<TokenId> id = vocabulary.find(*text);
    if (!id) {
      return corrupt_data(fmt::format("tokenizer_config.json {} \"{}\" is not in the vocabulary",
                                      key, *text));
    }
    return id;
  };
  TACHYON_ASSIGN_OR_RETURN(vocabulary.bos_id, id_of("bos_token"));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.eos_id, id_of("eos_token"));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.unknown_id, id_of("unk_token"));
  TACHYON_ASSIGN_OR_RETURN(vocabulary.padding_id, id_of("pad_token"));
  const boost::json::value* add_bos = config.if_contains("add_bos_token");
  vocabulary.add_bos = add_bos != nullptr && add_bos->is_bool() && add_bos->get_bool();
  const boost::json::value* add_eos = config.if_contains("add_eos_token");
  vocabulary.add_eos = add_eos != nullptr && add_eos->is_bool() && add_eos->get_bool();
  return Status();
}

Result<Vocabulary> Vocabulary::from_hf_tokenizer(std::string_view tokenizer_json,
                                                 std::optional<std::string_view> config_json) {
  TACHYON_ASSIGN_OR_RETURN(const boost::json::object tokenizer,
                           parse_json_object(tokenizer_json, "tokenizer.json"));
  const boost::json::value* model_value = tokenizer.if_contains("model");
  if (model_value == nullptr || !model_value->is_object()) {
    return corrupt_data("tokenizer.json has no \"model\" object");
  }
  const boost::json::object& model = model_value->get_object();
  const boost::json::value* type = model.if_contains("type");
  if (type == nullptr || !type->is_string() || type->get_string() != "BPE") {
    return unsupported(fmt::format("tokenizer.json model type {} is not supported (BPE)",
                                   type ? shown(*type) : "(none)"));
  }
  // BPE with byte fallback is a SentencePiece model as transformers converts it (Llama 2,
  // Mistral): <0xXX> byte tokens, "▁" for spaces.
  const boost::json::value* byte_fallback = model.if_contains("byte_fallback");
  const bool sentencepiece =
      byte_fallback != nullptr && byte_fallback->is_bool() && byte_fallback->get_bool();
  Vocabulary vocabulary;
  vocabulary.model = sentencepiece ? "llama" : "gpt2";

  // Ids from the vocab and the added tokens; together they must number 0..size-1.
  const boost::json::value* vocab = model.if_contains("vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return corrupt_data("tokenizer.json model has no \"vocab\" object");
  }
  std::vector<std::pair<int64_t, std::string>> entries;
  for (const auto& [text, id] : vocab->get_object()) {
    if (!id.is_int64() || id.get_int64() < 0 || id.get_int64() >= Vocabulary::kMaxSize) {
      return corrupt_data(fmt::format("tokenizer.json vocab \"{}\" has id {}", std::string(text),
                                      shown(id)));
    }
    entries.emplace_back(id.get_int64(), std::string(text));
  }
  struct Added {
    int64_t id;
    std::string content;
    bool special;
  };
  std::vector<Added> added;
  if (const boost::json::value* added_tokens = tokenizer.if_contains("added_tokens")) {
    if (!added_tokens->is_array()) return corrupt_data("tokenizer.json added_tokens is not an array");
    for (const boost::json::value& token : added_tokens->get_array()) {
      const boost::json::object* fields = token.if_object();
      const boost::json::value* id = fields ? fields->if_contains("id") : nullptr;
      const boost::json::value* content = fields ? fields->if_contains("content") : nullptr;
      if (id == nullptr || !id->is_int64() || id->get_int64() < 0 ||
          id->get_int64() >= Vocabulary::kMaxSize || content == nullptr || !content->is_string()) {
        return corrupt_data(fmt::format("tokenizer.json added token {} needs an id and content",
                                        shown(token)));
      }
      const boost::json::value* special = fields->if_contains("special");
      added.push_back({id->get_int64(), std::string(content->get_string()),
                       special != nullptr && special->is_bool() && special->get_bool()});
    }
  }
  int64_t size = 0;
  for (const auto& [id, text] : entries) size = std::max(size, id + 1);
  for (const Added& token : added) size = std::max(size, token.id + 1);
  if (size == 0) return corrupt_data("tokenizer.json has an empty vocabulary");
  vocabulary.tokens.assign(size, std::string());
  vocabulary.types.assign(size, TokenType::kUndefined);
  for (auto& [id, text] : entries) {
    if (vocabulary.types[id] != TokenType::kUndefined) {
      return corrupt_data(fmt::format("tokenizer.json vocab gives id {} to both \"{}\" and \"{}\"",
                                      id, vocabulary.tokens[id], text));
    }
    vocabulary.tokens[id] = std::move(text);
    vocabulary.types[id] = TokenType::kNormal;
  }
  for (Added& token : added) {
    if (vocabulary.types[token.id] != TokenType::kUndefined &&
        vocabulary.tokens[token.id] != token.content) {
      return corrupt_data(fmt::format("tokenizer.json added token {} \"{}\" clashes with vocab "
                                      "\"{}\"",
                                      token.id, token.content, vocabulary.tokens[token.id]));
    }
    vocabulary.tokens[token.id] = std::move(token.content);
    vocabulary.types[token.id] = token.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  for (int64_t id = 0; id < size; ++id) {
    if (vocabulary.types[id] == TokenType::kUndefined) {
      return corrupt_data(fmt::format("tokenizer.json has no token with id {} (of {})", id, size));
    }
    vocabulary.token_to_id.emplace(vocabulary.tokens[id], static_cast<TokenId>(id));
  }

  // Merges: "left right" strings, or [left, right] pairs (newer files).
  if (const boost::json::value* merges = model.if_contains("merges")) {
    if (!merges->is_array()) return corrupt_data("tokenizer.json model merges is not an array");
    for (const boost::json::value& merge : merges->get_array()) {
      if (merge.is_string()) {
        vocabulary.merges.emplace_back(merge.get_string());
      } else if (merge.is_array() && merge.get_array().size() == 2 &&
                 merge.get_array()[0].is_string() && merge.get_array()[1].is_string()) {
        vocabulary.merges.push_back(std::string(merge.get_array()[0].get_string()) + " " +
                                    std::string(merge.get_array()[1].get_string()));
      } else {
        return corrupt_data(fmt::format("tokenizer.json merge {} is not \"a b\" or [a, b]",
                                        shown(merge)));
      }
    }
  }

  if (sentencepiece) {
    TACHYON_RETURN_IF_ERROR(set_sentencepiece_fields(tokenizer, model, vocabulary));
  } else {
    TACHYON_RETURN_IF_ERROR(set_byte_level_pre_tokenizer(tokenizer, model, vocabulary));
  }

  // BOS/EOS from tokenizer_config.json.
  if (config_json) {
    TACHYON_ASSIGN_OR_RETURN(const boost::json::object config,
                             parse_json_object(*config_json, "tokenizer_config.json"));
    TACHYON_RETURN_IF_ERROR(apply_tokenizer_config(config, vocabulary));
  }
  return vocabulary;
}

}  // namespace tachyon
