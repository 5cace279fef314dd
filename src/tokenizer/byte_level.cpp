#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

namespace tachyon {
namespace {

std::string utf8_of(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
  return out;
}

struct Tables {
  std::array<std::string, 256> char_for_byte;
  std::unordered_map<uint32_t, unsigned char> byte_for_char;

  Tables() {
    // Printable Latin-1 bytes stand for themselves; the rest take code points from 256 up.
    uint32_t next = 256;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) ||
                             (byte >= 0xae && byte <= 0xff);
      const uint32_t code_point = printable ? byte : next++;
      char_for_byte[byte] = utf8_of(code_point);
      byte_for_char[code_point] = static_cast<unsigned char>(byte);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

const std::string& ByteLevel::char_for_byte(unsigned char byte) {
  return tables().char_for_byte[byte];
}

std::string ByteLevel::encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) out += tables().char_for_byte[byte];
  return out;
}

std::string ByteLevel::decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = utf8_sequence_length(lead);
    if (i + length > text.size()) length = 1;
    uint32_t code_point = lead;
    if (length == 2) {
      code_point = ((lead & 0x1fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3fu);
    } else if (length == 3) {
      code_point = ((lead & 0x0fu) << 12) |
                   ((static_cast<unsigned char>(text[i + 1]) & 0x3fu) << 6) |
                   (static_cast<unsigned char>(text[i + 2]) & 0x3fu);
    } else if (length == 4) {
      code_point = 0x110000;  // outside the alphabet: copy through
    }
    auto it = tables().byte_for_char.find(code_point);
    if (it != tables().byte_for_char.end() && length <= 2) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

}  // namespace tachyon
