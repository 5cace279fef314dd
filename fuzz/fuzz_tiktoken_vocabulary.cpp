// Any bytes given as Kimi's tiktoken.model and, after the first NUL byte, its
// tokenizer_config.json yield a vocabulary or a Status, never a crash or a hang; whatever
// parses also survives building a tokenizer and encoding and decoding with it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  if (split == std::string_view::npos) return 0;
  auto vocabulary =
      tachyon::Vocabulary::from_tiktoken(input.substr(0, split), input.substr(split + 1));
  if (!vocabulary.ok()) return 0;
  auto tokenizer = tachyon::Tokenizer::from_vocabulary(std::move(*vocabulary));
  if (tokenizer.ok()) {
    const auto ids = (*tokenizer)->encode("Hello [BOS] world 123 你好 \xe2\x96\x81\xff");
    (void)(*tokenizer)->decode(ids);
  }
  return 0;
}
