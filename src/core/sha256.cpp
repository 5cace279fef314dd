#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/check.h"

namespace tachyon {

Sha256Digest sha256(std::initializer_list<std::span<const uint8_t>> parts) {
  Sha256Digest digest;
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  TACHYON_CHECK(context != nullptr);
  TACHYON_CHECK(EVP_DigestInit_ex(context, EVP_sha256(), nullptr) == 1);
  for (std::span<const uint8_t> part : parts) {
    TACHYON_CHECK(EVP_DigestUpdate(context, part.data(), part.size()) == 1);
  }
  unsigned int length = 0;
  TACHYON_CHECK(EVP_DigestFinal_ex(context, digest.data(), &length) == 1);
  TACHYON_CHECK(length == digest.size());
  EVP_MD_CTX_free(context);
  return digest;
}

}  // namespace tachyon
