#include "gateway/key_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "core/check.h"

namespace tachyon::gateway {
namespace {

constexpr std::string_view kBase62 =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

}  // namespace

Result<std::string> generate_secret() {
  std::string secret(kSecretPrefix);
  unsigned char bytes[64];
  while (secret.size() < kSecretPrefix.size() + kSecretRandomChars) {
    if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
      return Status(StatusCode::kInternal, "the system random generator failed (RAND_bytes)");
    }
    for (unsigned char byte : bytes) {
      // 248 = 4 * 62: dropping bytes >= 248 keeps every character equally likely.
      if (byte >= 248) continue;
      secret += kBase62[byte % 62];
      if (secret.size() == kSecretPrefix.size() + kSecretRandomChars) break;
    }
  }
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return secret;
}

SecretHash hash_secret(std::string_view secret) {
  SecretHash hash{};
  unsigned int size = 0;
  const int ok =
      EVP_Digest(secret.data(), secret.size(), hash.data(), &size, EVP_sha256(), nullptr);
  TACHYON_CHECK(ok == 1 && size == hash.size());
  return hash;
}

bool hashes_equal(const SecretHash& a, const SecretHash& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string redact_secret(std::string_view secret) {
  if (secret.size() < 16) return "***";
  return std::string(secret.substr(0, 6)) + "***..." +
         std::string(secret.substr(secret.size() - 4));
}

std::string secret_hint(std::string_view secret) {
  if (secret.size() < 16) return "...";
  return std::string(secret.substr(0, 6)) + "..." + std::string(secret.substr(secret.size() - 4));
}

}  // namespace tachyon::gateway
