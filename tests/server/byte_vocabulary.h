// Vocabularies for the server tests: SentencePiece-style with byte fallback and no merges, so
// every byte of text is one token: <unk> 0, <s> 1, </s> 2, then id 3 + b spells byte b.
#pragma once

#include <cstdio>
#include <string>

#include "tokenizer/vocabulary.h"

namespace tachyon::server {

inline void add_token(Vocabulary& vocabulary, const std::string& text, TokenType type) {
  vocabulary.token_to_id.emplace(text, static_cast<TokenId>(vocabulary.tokens.size()));
  vocabulary.tokens.push_back(text);
  vocabulary.scores.push_back(0.0f);
  vocabulary.types.push_back(type);
}

inline Vocabulary byte_vocabulary() {
  Vocabulary vocabulary;
  vocabulary.model = "llama";
  add_token(vocabulary, "<unk>", TokenType::kUnknown);
  add_token(vocabulary, "<s>", TokenType::kControl);
  add_token(vocabulary, "</s>", TokenType::kControl);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    add_token(vocabulary, name, TokenType::kByte);
  }
  vocabulary.unknown_id = 0;
  return vocabulary;
}

}  // namespace tachyon::server
