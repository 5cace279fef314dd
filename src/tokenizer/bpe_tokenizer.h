// Byte-level BPE (tokenizer.ggml.model = "gpt2"): pre-tokenize with the family's regexes, map
// bytes to GPT-2's printable alphabet, then apply merges lowest rank first.
#pragma once

#include <memory>
#include <unordered_map>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

class BpeTokenizer : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(Vocabulary vocabulary);

  std::string token_bytes(TokenId id) const override;

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override;

 private:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  static uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  explicit BpeTokenizer(Vocabulary vocabulary) : Tokenizer(std::move(vocabulary)) {}
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;

  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  TokenId byte_token_[256];  // token of each byte's stand-in character, -1 when missing
};

}  // namespace tachyon
