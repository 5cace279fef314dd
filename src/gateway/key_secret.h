// API key secrets: generation from a CSPRNG, SHA-256 hashing (only the hash is stored),
// constant-time comparison and redaction for error messages. A secret is never logged.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tachyon::gateway {

inline constexpr std::string_view kSecretPrefix = "sk-tachyon-";
// 43 base62 characters carry 256 bits.
inline constexpr size_t kSecretRandomChars = 43;

using SecretHash = std::array<unsigned char, 32>;  // SHA-256

// "sk-tachyon-" + 43 base62 characters from OpenSSL's RAND_bytes.
Result<std::string> generate_secret();

SecretHash hash_secret(std::string_view secret);

// CRYPTO_memcmp: the time taken does not depend on where the hashes differ.
bool hashes_equal(const SecretHash& a, const SecretHash& b);

// What an error message may show of a secret a client sent: "sk-tac***...abcd" (first 6 and
// last 4 characters), or "***" when it is too short to show any of it.
std::string redact_secret(std::string_view secret);

// "sk-tac...abcd": stored beside the hash so `keys list` can show which key is which.
std::string secret_hint(std::string_view secret);

}  // namespace tachyon::gateway
