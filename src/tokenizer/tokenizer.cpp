#include "tokenizer/tokenizer.h"

#include <algorithm>

#include <fmt/format.h>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace tachyon {

Tokenizer::Tokenizer(Vocabulary vocabulary) : vocabulary_(std::move(vocabulary)) {
  for (TokenId id = 0; id < vocabulary_.size(); ++id) {
    const std::string& text = vocabulary_.tokens[id];
    if (vocabulary_.is_special(id) && !text.empty()) {
      special_by_first_byte_[static_cast<unsigned char>(text[0])].push_back(id);
    }
  }
  for (auto& [byte, ids] : special_by_first_byte_) {
    std::stable_sort(ids.begin(), ids.end(), [this](TokenId a, TokenId b) {
      return vocabulary_.tokens[a].size() > vocabulary_.tokens[b].size();
    });
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  TACHYON_ASSIGN_OR_RETURN(Vocabulary vocabulary, Vocabulary::from_gguf(file));
  return from_vocabulary(std::move(vocabulary));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocabulary(Vocabulary vocabulary) {
  if (vocabulary.model == "gpt2") {
    TACHYON_ASSIGN_OR_RETURN(auto tokenizer, BpeTokenizer::create(std::move(vocabulary)));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }
  if (vocabulary.model == "llama") {
    TACHYON_ASSIGN_OR_RETURN(auto tokenizer, SentencePieceTokenizer::create(std::move(vocabulary)));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }
  return unsupported(fmt::format(
      "tokenizer type '{}' (tokenizer.ggml.model) is not supported; supported: gpt2 (byte-level "
      "BPE), llama (SentencePiece)",
      vocabulary.model));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> out;
  if (options.add_special && vocabulary_.add_bos && vocabulary_.bos_id) {
    out.push_back(*vocabulary_.bos_id);
  }
  bool after_special = true;
  size_t text_start = 0;
  size_t position = 0;
  while (position < text.size()) {
    TokenId matched = -1;
    // User-defined tokens (Gemma's runs of spaces, tabs and newlines) are matched whole even
    // when special tokens are not parsed, as llama.cpp and SentencePiece do.
    auto it = special_by_first_byte_.find(static_cast<unsigned char>(text[position]));
    if (it != special_by_first_byte_.end()) {
      for (TokenId id : it->second) {
        if (!options.parse_special && vocabulary_.types[id] != TokenType::kUserDefined) continue;
        if (text.substr(position).starts_with(vocabulary_.tokens[id])) {
          matched = id;
          break;
        }
      }
    }
    if (matched < 0) {
      ++position;
      continue;
    }
    if (position > text_start) {
      encode_text(text.substr(text_start, position - text_start), after_special, out);
    }
    out.push_back(matched);
    after_special = true;
    position += vocabulary_.tokens[matched].size();
    text_start = position;
  }
  if (text_start < text.size()) encode_text(text.substr(text_start), after_special, out);
  if (options.add_special && vocabulary_.add_eos && vocabulary_.eos_id) {
    out.push_back(*vocabulary_.eos_id);
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    if (!is_valid(id)) {
      return invalid_argument(
          fmt::format("token id {} is outside the vocabulary (0..{})", id, vocabulary_size() - 1));
    }
    if (skip_special && vocabulary_.types[id] == TokenType::kControl) continue;
    out += token_bytes(id);
  }
  if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace tachyon
