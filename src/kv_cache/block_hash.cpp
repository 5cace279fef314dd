#include "kv_cache/block_hash.h"

#include "core/sha256.h"

namespace tachyon {

BlockHash BlockHash::root(std::string_view cache_salt) {
  static constexpr std::string_view kDomain = "tachyon kv prefix v1";
  return {sha256({as_bytes(kDomain), as_bytes(cache_salt)})};
}

BlockHash BlockHash::chain(const BlockHash& parent, std::span<const int32_t> tokens) {
  // Token ids as little-endian int32 (x86's native order).
  return {sha256({std::span<const uint8_t>(parent.bytes),
                  std::span(reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes())})};
}

}  // namespace tachyon
