#include "tokenizer/streaming_detokenizer.h"

#include <fmt/format.h>

namespace tachyon {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

bool is_continuation(unsigned char byte) { return (byte & 0xc0) == 0x80; }

// Length of the valid UTF-8 sequence at `bytes[i]`: > 0 when complete and valid, 0 when
// valid so far but cut off by the end, -1 when invalid.
int sequence_at(std::string_view bytes, size_t i) {
  const auto lead = static_cast<unsigned char>(bytes[i]);
  if (lead < 0x80) return 1;
  int length;
  unsigned char low = 0x80;  // allowed range of the second byte (rules out overlongs and
  unsigned char high = 0xbf;  // surrogates, and code points past U+10FFFF)
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
    return -1;
  }
  for (int k = 1; k < length; ++k) {
    if (i + k >= bytes.size()) return 0;
    const auto byte = static_cast<unsigned char>(bytes[i + k]);
    if (k == 1 ? (byte < low || byte > high) : !is_continuation(byte)) return -1;
  }
  return length;
}

}  // namespace

void take_complete_utf8(std::string& bytes, std::string& out, bool final) {
  size_t i = 0;
  while (i < bytes.size()) {
    const int length = sequence_at(bytes, i);
    if (length > 0) {
      out.append(bytes, i, length);
      i += length;
    } else if (length == 0 && !final) {
      break;  // wait for the rest of this character
    } else {
      out += kReplacement;
      // Skip the lead and the continuation bytes that belonged to it.
      ++i;
      while (length == 0 && i < bytes.size()) ++i;
    }
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
