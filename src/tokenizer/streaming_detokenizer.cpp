#include "tokenizer/streaming_detokenizer.h"

#include <fmt/format.h>

namespace tachyon {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

bool is_continuation(unsigned char byte) { return (byte & 0xc0) == 0x80; }

// What starts at bytes[i]: a complete character of `length` bytes; an unfinished one cut off
// by the end; or an invalid sequence whose maximal valid prefix is `length` bytes (Unicode's
// "maximal subpart", which becomes a single U+FFFD, as in Python and Hugging Face).
struct Sequence {
  enum Kind { kComplete, kUnfinished, kInvalid } kind;
  size_t length;
};

Sequence sequence_at(std::string_view bytes, size_t i) {
  const auto lead = static_cast<unsigned char>(bytes[i]);
  if (lead < 0x80) return {Sequence::kComplete, 1};
  size_t length;
  unsigned char low = 0x80;   // allowed range of the second byte (rules out overlongs,
  unsigned char high = 0xbf;  // surrogates and code points past U+10FFFF)
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return {Sequence::kInvalid, 1};
  }
  for (size_t k = 1; k < length; ++k) {
    if (i + k >= bytes.size()) return {Sequence::kUnfinished, k};
    const auto byte = static_cast<unsigned char>(bytes[i + k]);
    if (k == 1 ? (byte < low || byte > high) : !is_continuation(byte)) {
      return {Sequence::kInvalid, k};
    }
  }
  return {Sequence::kComplete, length};
}

}  // namespace

void take_complete_utf8(std::string& bytes, std::string& out, bool final) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Sequence sequence = sequence_at(bytes, i);
    if (sequence.kind == Sequence::kComplete) {
      out.append(bytes, i, sequence.length);
    } else if (sequence.kind == Sequence::kUnfinished && !final) {
      break;  // wait for the rest of this character
    } else {
      out += kReplacement;
    }
    i += sequence.length;
  }
  bytes.erase(0, i);
}

Result<std::string> StreamingDetokenizer::push(TokenId id) {
  if (!tokenizer_.is_valid(id)) {
    return invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", id,
                                        tokenizer_.vocabulary_size() - 1));
  }
  if (skip_special_ && tokenizer_.vocabulary().types[id] == TokenType::kControl) return std::string();
  std::string piece = tokenizer_.token_bytes(id);
  if (at_start_ && !piece.empty()) {
    if (tokenizer_.strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
    at_start_ = false;
  }
  pending_ += piece;
  std::string out;
  take_complete_utf8(pending_, out, false);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out;
  take_complete_utf8(pending_, out, true);
  at_start_ = true;
  return out;
}

}  // namespace tachyon
