// SHA-256 (OpenSSL) over a list of byte ranges, as if they were one.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace tachyon {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::initializer_list<std::span<const uint8_t>> parts);

// A string's bytes, for sha256's parts.
inline std::span<const uint8_t> as_bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace tachyon
