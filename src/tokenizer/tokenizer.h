// Text <-> token ids for a model, built from its GGUF vocabulary. Subclasses implement one
// algorithm each; this base handles special tokens, BOS/EOS and decoding.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model_files/gguf_file.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {

struct EncodeOptions {
  // Text that spells a special token becomes that token (user-defined tokens always do).
  bool parse_special = true;
  bool add_special = false;   // add BOS/EOS as the vocabulary asks
};

class Tokenizer {
 public:
  // Chooses the algorithm from tokenizer.ggml.model ("gpt2" or "llama").
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  static Result<std::unique_ptr<Tokenizer>> from_vocabulary(Vocabulary vocabulary);
  virtual ~Tokenizer() = default;

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Concatenated bytes of the tokens (may end inside a UTF-8 sequence); special tokens appear
  // as their text unless `skip_special`. Ids outside the vocabulary are an error.
  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The bytes one token stands for, before any leading-space stripping.
  virtual std::string token_bytes(TokenId id) const = 0;
  // SentencePiece vocabularies prepend a space to text; decoding drops it again at the start.
  virtual bool strips_leading_space() const { return false; }

  const Vocabulary& vocabulary() const { return vocabulary_; }
  int32_t vocabulary_size() const { return vocabulary_.size(); }
  bool is_valid(TokenId id) const { return id >= 0 && id < vocabulary_.size(); }

 protected:
  explicit Tokenizer(Vocabulary vocabulary);

  // Encodes text that holds no special tokens. `after_special` is true at the start of the
  // input and right after a special token.
  virtual void encode_text(std::string_view text, bool after_special,
                           std::vector<TokenId>& out) const = 0;

  Vocabulary vocabulary_;

 private:
  // Special tokens by first byte, longest first, for leftmost-longest matching.
  std::unordered_map<unsigned char, std::vector<TokenId>> special_by_first_byte_;
};

}  // namespace tachyon
