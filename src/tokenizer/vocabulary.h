// A tokenizer's vocabulary as GGUF stores it: token texts, scores, types, merges and the ids
// of special tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model_files/gguf_file.h"

namespace tachyon {

using TokenId = int32_t;

// As numbered in tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocabulary {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre: selects the pre-tokenizer for "gpt2"
  std::vector<std::string> tokens;  // token text, indexed by id
  std::vector<float> scores;        // empty or one per token
  std::vector<TokenType> types;     // one per token (kNormal when the file has none)
  std::vector<std::string> merges;  // "left right", rank = index; byte-level BPE only
  std::unordered_map<std::string, TokenId> token_to_id;

  std::optional<TokenId> bos_id, eos_id, eot_id, eom_id, unknown_id, padding_id;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend "▁" to text

  // Largest vocabulary accepted from any file; real models stay below 300k.
  static constexpr int64_t kMaxSize = int64_t{1} << 24;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // Tokens whose text in the input is matched whole (as Hugging Face's added tokens are).
  bool is_special(TokenId id) const {
    return types[id] == TokenType::kControl || types[id] == TokenType::kUserDefined ||
           types[id] == TokenType::kUnknown;
  }
  std::optional<TokenId> find(const std::string& text) const {
    auto it = token_to_id.find(text);
    if (it == token_to_id.end()) return std::nullopt;
    return it->second;
  }

  // Reads tokenizer.ggml.* metadata; every array and id is validated.
  static Result<Vocabulary> from_gguf(const GgufFile& file);
  // Reads a Hugging Face tokenizer.json (byte-level BPE; its pre-tokenizer must be one of the
  // known families') and, when given, tokenizer_config.json's special tokens and add_bos_token
  // (hf_vocabulary.cpp).
  static Result<Vocabulary> from_hf_tokenizer(std::string_view tokenizer_json,
                                              std::optional<std::string_view> config_json);
  // Reads Kimi-K2's tiktoken.model ("<base64 bytes> <rank>" lines; merges derived from the
  // ranks as tiktoken applies them) and tokenizer_config.json (added_tokens_decoder names the
  // 256 ids reserved after the ranked tokens; the others are "<|reserved_token_ID|>"), with
  // Kimi-K2's pre-tokenizer (tiktoken_vocabulary.cpp).
  static Result<Vocabulary> from_tiktoken(std::string_view ranks_file,
                                          std::string_view config_json);
};

}  // namespace tachyon
