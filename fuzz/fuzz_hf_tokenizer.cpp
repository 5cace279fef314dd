// Any bytes given as a Hugging Face tokenizer.json (and, split at the first NUL byte, a
// tokenizer_config.json) yield a vocabulary or a Status, never a crash or a hang; whatever
// parses also survives building a tokenizer and encoding and decoding with it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, split);
  std::optional<std::string_view> config;
  if (split != std::string_view::npos) config = input.substr(split + 1);
  auto vocabulary = tachyon::Vocabulary::from_hf_tokenizer(tokenizer_json, config);
  if (!vocabulary.ok()) return 0;
  auto tokenizer = tachyon::Tokenizer::from_vocabulary(std::move(*vocabulary));
  if (tokenizer.ok()) {
    const auto ids = (*tokenizer)->encode("Hello <|bos|> world 123 \xe2\x96\x81\xff");
    (void)(*tokenizer)->decode(ids);
  }
  return 0;
}
