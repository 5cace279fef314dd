// Names of full KV blocks for prefix caching: a block's hash chains its parent's hash, its
// token ids and (through the root) the request's cache salt, with SHA-256, so two blocks share
// a hash only when the whole token prefix up to and including them is the same (and so is the
// salt). A cryptographic hash makes a collision — which would silently serve another prompt's
// KV — practically impossible.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace tachyon {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};

  bool operator==(const BlockHash&) const = default;

  // The chain's start: derived from the cache salt (empty salt ⇒ a fixed root).
  static BlockHash root(std::string_view cache_salt);
  // The hash of the block holding `tokens` whose preceding block hashes to `parent`.
  static BlockHash chain(const BlockHash& parent, std::span<const int32_t> tokens);
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& hash) const {
    size_t value;
    static_assert(sizeof(value) <= sizeof(hash.bytes));
    __builtin_memcpy(&value, hash.bytes.data(), sizeof(value));
    return value;
  }
};

}  // namespace tachyon
