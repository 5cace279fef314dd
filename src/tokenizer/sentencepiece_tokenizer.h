// SentencePiece-style BPE (tokenizer.ggml.model = "llama"): spaces become "▁", then adjacent
// pieces merge while their concatenation is a token, highest score first; what is left
// unknown falls back to <0xXX> byte tokens.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace tachyon {

class SentencePieceTokenizer : public Tokenizer {
 public:
  static Result<std::unique_ptr<SentencePieceTokenizer>> create(Vocabulary vocabulary);

  std::string token_bytes(TokenId id) const override;
  bool strips_leading_space() const override { return vocabulary_.add_space_prefix; }

 protected:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override;

 private:
  explicit SentencePieceTokenizer(Vocabulary vocabulary) : Tokenizer(std::move(vocabulary)) {}

  std::optional<TokenId> byte_token_[256];  // <0xXX> tokens, when the vocabulary has them
};

}  // namespace tachyon
