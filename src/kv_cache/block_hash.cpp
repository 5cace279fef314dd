#include "kv_cache/block_hash.h"

#include <openssl/evp.h>

#include "core/check.h"

namespace tachyon {
namespace {

// SHA-256 over a list of byte ranges.
BlockHash sha256(std::initializer_list<std::span<const uint8_t>> parts) {
  BlockHash hash;
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  TACHYON_CHECK(context != nullptr);
  TACHYON_CHECK(EVP_DigestInit_ex(context, EVP_sha256(), nullptr) == 1);
  for (std::span<const uint8_t> part : parts) {
    TACHYON_CHECK(EVP_DigestUpdate(context, part.data(), part.size()) == 1);
  }
  unsigned int length = 0;
  TACHYON_CHECK(EVP_DigestFinal_ex(context, hash.bytes.data(), &length) == 1);
  TACHYON_CHECK(length == hash.bytes.size());
  EVP_MD_CTX_free(context);
  return hash;
}

}  // namespace

BlockHash BlockHash::root(std::string_view cache_salt) {
  static constexpr std::string_view kDomain = "tachyon kv prefix v1";
  return sha256({std::span(reinterpret_cast<const uint8_t*>(kDomain.data()), kDomain.size()),
                 std::span(reinterpret_cast<const uint8_t*>(cache_salt.data()), cache_salt.size())});
}

BlockHash BlockHash::chain(const BlockHash& parent, std::span<const int32_t> tokens) {
  // Token ids as little-endian int32 (x86's native order).
  return sha256({std::span<const uint8_t>(parent.bytes),
                 std::span(reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes())});
}

}  // namespace tachyon
