// GPT-2's byte-level alphabet: every byte has a printable stand-in character, so byte-level BPE
// vocabularies hold only printable text ("Ġ" stands for the space byte).
#pragma once

#include <string>
#include <string_view>

namespace tachyon {

class ByteLevel {
 public:
  // Each byte of `bytes` replaced by the UTF-8 of its stand-in character.
  static std::string encode(std::string_view bytes);
  // The inverse. Characters without a byte mapping (e.g. added tokens stored as raw text)
  // are copied through unchanged.
  static std::string decode(std::string_view text);
  // UTF-8 of the stand-in for one byte.
  static const std::string& char_for_byte(unsigned char byte);
};

// Length of the UTF-8 sequence that starts with `lead`, or 1 for an invalid lead byte.
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  if ((lead & 0xf8) == 0xf0) return 4;
  return 1;
}

}  // namespace tachyon
