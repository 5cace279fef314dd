// Splits text into pieces before BPE, with the regexes of a model family (tokenizer.ggml.pre).
// Each stage splits every piece of the previous stage: matches and the gaps between them both
// become pieces ("isolated" splitting, as Hugging Face's Split pre-tokenizer does).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tachyon {

class PreTokenizer {
 public:
  // Known names: default, gpt2, gpt-2, smollm, llama-bpe, llama3, qwen2, deepseek-v3, kimi-k2.
  static Result<std::shared_ptr<const PreTokenizer>> for_name(std::string_view name);
  static std::vector<std::string> known_names();

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `pieces`. Never fails: bytes that are not
  // valid UTF-8 simply match no character class.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // Llama-3 style vocabularies: a piece that is itself a token is taken whole, skipping merges.
  bool ignore_merges() const { return ignore_merges_; }
  // Qwen2's tokenizer puts text in Unicode NFC before splitting.
  bool normalize_nfc() const { return normalize_nfc_; }

 private:
  struct CompiledRegex;
  PreTokenizer() = default;
  static Result<std::unique_ptr<CompiledRegex>> compile(const std::string& pattern);

  std::vector<std::unique_ptr<CompiledRegex>> stages_;
  bool ignore_merges_ = false;
  bool normalize_nfc_ = false;
};

}  // namespace tachyon
