// KeyStore: API keys in SQLite (table api_keys). A secret is returned once, by create(), and
// only its SHA-256 hash is stored. Thread-safe (one connection behind a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/key_policy.h"
#include "gateway/key_secret.h"
#include "gateway/sql_database.h"

namespace tachyon::gateway {

struct ApiKey {
  int64_t id = 0;
  std::string name;
  KeyPolicy policy;
  std::string hint;  // "sk-tac...abcd": tells keys apart, useless to an attacker
  int64_t created_unix = 0;
  std::optional<int64_t> revoked_unix;

  bool revoked() const { return revoked_unix.has_value(); }
};

struct CreatedKey {
  ApiKey key;
  std::string secret;  // shown to the user once; not recoverable afterwards
};

class KeyStore {
 public:
  // The database file holding the table (created on first use with OpenMode::kCreate).
  static Result<std::unique_ptr<KeyStore>> open(const std::string& path,
                                                OpenMode mode = OpenMode::kCreate);

  // Names: 1-64 of [A-Za-z0-9._-], not all digits (those are ids), not "static-..." (the
  // names of `--api-key` keys), unique among keys that are not revoked.
  Result<CreatedKey> create(std::string_view name, const KeyPolicy& policy);
  // Every key, revoked ones included, oldest first.
  Result<std::vector<ApiKey>> list();
  // By id when all digits, else by name (the live key of that name, else the latest revoked).
  Result<ApiKey> find(std::string_view name_or_id);
  Result<ApiKey> update(std::string_view name_or_id, const KeyPolicyChange& change);
  Result<ApiKey> revoke(std::string_view name_or_id);

  // The key whose secret hashes to `hash` (revoked or not), or nullopt. The lookup goes by the
  // hash, so its timing says nothing about the secret; the final check uses CRYPTO_memcmp.
  Result<std::optional<ApiKey>> find_by_hash(const SecretHash& hash);

  const std::string& path() const { return db_->path(); }

 private:
  explicit KeyStore(std::unique_ptr<SqlDatabase> db) : db_(std::move(db)) {}
  Result<ApiKey> find_locked(std::string_view name_or_id);

  std::mutex mutex_;
  std::unique_ptr<SqlDatabase> db_;
};

// Status for a bad key name, or ok.
Status validate_key_name(std::string_view name);

}  // namespace tachyon::gateway
