#include "gateway/key_store.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <fmt/format.h>

namespace tachyon::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS api_keys (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  key_hash BLOB NOT NULL UNIQUE,
  key_hint TEXT NOT NULL,
  tier TEXT NOT NULL,
  rpm INTEGER NOT NULL DEFAULT 0,
  tpm INTEGER NOT NULL DEFAULT 0,
  concurrency INTEGER NOT NULL DEFAULT 0,
  daily_tokens INTEGER NOT NULL DEFAULT 0,
  monthly_tokens INTEGER NOT NULL DEFAULT 0,
  max_tokens INTEGER NOT NULL DEFAULT 0,
  models TEXT NOT NULL DEFAULT '',
  created_unix INTEGER NOT NULL,
  revoked_unix INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS api_keys_live_name ON api_keys(name) WHERE revoked_unix IS NULL;
)sql";

constexpr std::string_view kColumns =
    "id, name, key_hint, tier, rpm, tpm, concurrency, daily_tokens, monthly_tokens, max_tokens, "
    "models, created_unix, revoked_unix";

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A row selected with kColumns.
ApiKey read_key(const SqliteStatement& row) {
  ApiKey key;
  key.id = row.column_int64(0);
  key.name = row.column_text(1);
  key.hint = row.column_text(2);
  Result<Tier> tier = parse_tier(row.column_text(3));
  key.policy.tier = tier.ok() ? *tier : Tier::kStandard;
  key.policy.requests_per_minute = row.column_int64(4);
  key.policy.tokens_per_minute = row.column_int64(5);
  key.policy.max_concurrent_requests = row.column_int64(6);
  key.policy.daily_tokens = row.column_int64(7);
  key.policy.monthly_tokens = row.column_int64(8);
  key.policy.max_tokens = row.column_int64(9);
  key.policy.models = split_models(row.column_text(10));
  key.created_unix = row.column_int64(11);
  if (!row.column_is_null(12)) key.revoked_unix = row.column_int64(12);
  return key;
}

}  // namespace

Status validate_key_name(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return invalid_argument(
        fmt::format("key name must be 1 to 64 characters, got {}", name.size()));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return invalid_argument(fmt::format(
          "key name '{}' has a character other than letters, digits, '.', '_' and '-'", name));
    }
  }
  if (all_digits(name)) {
    return invalid_argument(fmt::format("key name '{}' is all digits, which reads as an id", name));
  }
  if (name.starts_with("static-")) {
    return invalid_argument(
        fmt::format("key name '{}' starts with 'static-', kept for --api-key keys", name));
  }
  return Status::ok_status();
}

Result<std::unique_ptr<KeyStore>> KeyStore::open(const std::string& path, OpenMode mode) {
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDatabase> db, SqliteDatabase::open(path, mode));
  Status status = db->execute(kSchema);
  if (!status.ok()) return io_error(fmt::format("{}: {}", path, status.message()));
  return std::unique_ptr<KeyStore>(new KeyStore(std::move(db)));
}

Result<CreatedKey> KeyStore::create(std::string_view name, const KeyPolicy& policy) {
  TACHYON_RETURN_IF_ERROR(validate_key_name(name));
  TACHYON_RETURN_IF_ERROR(validate_policy(policy));
  TACHYON_ASSIGN_OR_RETURN(std::string secret, generate_secret());
  const SecretHash hash = hash_secret(secret);
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement insert,
      db_->prepare("INSERT INTO api_keys (name, key_hash, key_hint, tier, rpm, tpm, concurrency, "
                   "daily_tokens, monthly_tokens, max_tokens, models, created_unix) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  insert.bind(1, name)
      .bind_blob(2, hash.data(), hash.size())
      .bind(3, std::string_view(secret_hint(secret)))
      .bind(4, std::string_view(tier_name(policy.tier)))
      .bind(5, policy.requests_per_minute)
      .bind(6, policy.tokens_per_minute)
      .bind(7, policy.max_concurrent_requests)
      .bind(8, policy.daily_tokens)
      .bind(9, policy.monthly_tokens)
      .bind(10, policy.max_tokens)
      .bind(11, std::string_view(join_models(policy.models)))
      .bind(12, unix_now());
  Status status = insert.run();
  if (is_constraint_violation(status) && status.message().find("name") != std::string::npos) {
    return invalid_argument(fmt::format("a key named '{}' already exists", name));
  }
  TACHYON_RETURN_IF_ERROR(status);
  TACHYON_ASSIGN_OR_RETURN(ApiKey key, find_locked(std::to_string(db_->last_insert_rowid())));
  return CreatedKey{std::move(key), std::move(secret)};
}

Result<std::vector<ApiKey>> KeyStore::list() {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db_->prepare(fmt::format("SELECT {} FROM api_keys ORDER BY id", kColumns)));
  std::vector<ApiKey> keys;
  while (true) {
    TACHYON_ASSIGN_OR_RETURN(bool row, select.step());
    if (!row) break;
    keys.push_back(read_key(select));
  }
  return keys;
}

Result<ApiKey> KeyStore::find(std::string_view name_or_id) {
  std::lock_guard lock(mutex_);
  return find_locked(name_or_id);
}

Result<ApiKey> KeyStore::find_locked(std::string_view name_or_id) {
  const bool by_id = all_digits(name_or_id);
  const std::string sql = by_id ? fmt::format("SELECT {} FROM api_keys WHERE id = ?", kColumns)
                                : fmt::format(
                                      "SELECT {} FROM api_keys WHERE name = ? "
                                      "ORDER BY revoked_unix IS NOT NULL, id DESC LIMIT 1",
                                      kColumns);
  TACHYON_ASSIGN_OR_RETURN(SqliteStatement select, db_->prepare(sql));
  if (by_id) {
    int64_t id = 0;
    for (char c : name_or_id) {
      if (id > (INT64_MAX - 9) / 10) return not_found(fmt::format("no key with id {}", name_or_id));
      id = id * 10 + (c - '0');
    }
    select.bind(1, id);
  } else {
    select.bind(1, name_or_id);
  }
  TACHYON_ASSIGN_OR_RETURN(bool row, select.step());
  if (!row) {
    return not_found(by_id ? fmt::format("no key with id {}", name_or_id)
                           : fmt::format("no key named '{}'", name_or_id));
  }
  return read_key(select);
}

Result<ApiKey> KeyStore::update(std::string_view name_or_id, const KeyPolicyChange& change) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(ApiKey key, find_locked(name_or_id));
  if (key.revoked()) return invalid_argument(fmt::format("key '{}' is revoked", key.name));
  const KeyPolicy policy = apply_change(key.policy, change);
  TACHYON_RETURN_IF_ERROR(validate_policy(policy));
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement statement,
      db_->prepare(
          "UPDATE api_keys SET tier = ?, rpm = ?, tpm = ?, concurrency = ?, "
          "daily_tokens = ?, monthly_tokens = ?, max_tokens = ?, models = ? WHERE id = ?"));
  statement.bind(1, std::string_view(tier_name(policy.tier)))
      .bind(2, policy.requests_per_minute)
      .bind(3, policy.tokens_per_minute)
      .bind(4, policy.max_concurrent_requests)
      .bind(5, policy.daily_tokens)
      .bind(6, policy.monthly_tokens)
      .bind(7, policy.max_tokens)
      .bind(8, std::string_view(join_models(policy.models)))
      .bind(9, key.id);
  TACHYON_RETURN_IF_ERROR(statement.run());
  key.policy = policy;
  return key;
}

Result<ApiKey> KeyStore::revoke(std::string_view name_or_id) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(ApiKey key, find_locked(name_or_id));
  if (key.revoked()) return invalid_argument(fmt::format("key '{}' is already revoked", key.name));
  TACHYON_ASSIGN_OR_RETURN(SqliteStatement statement,
                           db_->prepare("UPDATE api_keys SET revoked_unix = ? WHERE id = ?"));
  key.revoked_unix = unix_now();
  statement.bind(1, *key.revoked_unix).bind(2, key.id);
  TACHYON_RETURN_IF_ERROR(statement.run());
  return key;
}

Result<std::optional<ApiKey>> KeyStore::find_by_hash(const SecretHash& hash) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db_->prepare(fmt::format("SELECT {}, key_hash FROM api_keys WHERE key_hash = ?", kColumns)));
  select.bind_blob(1, hash.data(), hash.size());
  TACHYON_ASSIGN_OR_RETURN(bool row, select.step());
  if (!row) return std::optional<ApiKey>();
  const std::string stored = select.column_blob(13);
  SecretHash stored_hash{};
  if (stored.size() != stored_hash.size()) return std::optional<ApiKey>();
  std::copy(stored.begin(), stored.end(), stored_hash.begin());
  if (!hashes_equal(stored_hash, hash)) return std::optional<ApiKey>();
  return std::optional<ApiKey>(read_key(select));
}

}  // namespace tachyon::gateway
