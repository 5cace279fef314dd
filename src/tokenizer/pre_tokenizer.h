// Splits text into pieces before BPE, with the regexes of a model family (tokenizer.ggml.pre).
// Each stage splits every piece of the previous stage: matches and the gaps between them both
// become pieces ("isolated" splitting, as Hugging Face's Split pre-tokenizer does).
#pragma once

#include <memory>
#include <optional>
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
  // The name whose recipe is exactly these regex stages (in order) with these flags, as a
  // Hugging Face tokenizer.json spells them; nothing when no known family matches.
  static std::optional<std::string> name_for_stages(const std::vector<std::string>& stages,
                                                    bool ignore_merges, bool normalize_nfc);
  // GPT-2's split regex, what Hugging Face's ByteLevel(use_regex=true) applies, and SmolLM's
  // single-digit stage, what Digits(individual_digits=true) applies.
  static std::string byte_level_pattern();
  static std::string single_digit_pattern();

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
