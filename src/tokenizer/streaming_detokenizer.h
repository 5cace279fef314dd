// Turns a stream of token ids into text piece by piece without ever emitting a broken UTF-8
// sequence: bytes of an unfinished character wait for the next token; bytes that can never
// form a character become U+FFFD, as Hugging Face's decode does.
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Text that became complete with this token (possibly empty).
  Result<std::string> push(TokenId id);
  // Whatever is still held back, with an unfinished character replaced by U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;  // bytes not yet emitted
};

// Moves the longest prefix of `bytes` that is complete UTF-8 to `out`, replacing invalid bytes
// with U+FFFD; an unfinished but so far valid sequence at the end stays in `bytes` unless
// `final` is set.
void take_complete_utf8(std::string& bytes, std::string& out, bool final);

}  // namespace tachyon
