// UsageLedger: one SQLite row per finished, failed or cancelled request (table usage), written
// synchronously in its own transaction so a crash loses no finished request. A UNIQUE
// request_id makes a replayed record count once. Quotas are rebuilt from it at start.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/sql_database.h"

namespace tachyon::gateway {

struct UsageRecord {
  std::string request_id;  // required and unique: the idempotency key
  int64_t unix_time = 0;   // when the request ended (UTC seconds); 0: now
  int64_t key_id = 0;
  std::string key_name;
  std::string model;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;
  double queue_seconds = 0;
  double ttft_seconds = 0;
  double duration_seconds = 0;
  std::string status = "ok";  // "ok", "error", "cancelled" or "rejected"
  std::string finish_reason;  // "stop", "length", ...; empty when there is none
};

enum class UsageGrouping { kKey, kDay };

struct UsageQuery {
  std::optional<std::string> key_name;  // only this key
  std::optional<int64_t> since_unix;    // only records at or after this time
  UsageGrouping group_by = UsageGrouping::kKey;
};

struct UsageSummary {
  std::string group;  // the key name, or the UTC day "YYYY-MM-DD"
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t errors = 0;     // status "error"
  int64_t cancelled = 0;  // status "cancelled"
  int64_t rejected = 0;   // status "rejected"
};

class UsageLedger {
 public:
  static Result<std::unique_ptr<UsageLedger>> open(const std::string& path,
                                                   OpenMode mode = OpenMode::kCreate);

  // true: written (or kept to write: below); false: this request_id was already recorded
  // (nothing changed). While the database is unreachable (PostgreSQL restarting) records are
  // kept in memory, in order, and written first by the next record() that reaches it; so a
  // restart of the database loses none (a crash of this process while it is down would).
  Result<bool> record(const UsageRecord& record);
  // prompt + completion tokens of one key at or after `since_unix`.
  Result<int64_t> tokens_since(int64_t key_id, int64_t since_unix);
  // Totals per group, sorted by group.
  Result<std::vector<UsageSummary>> summarize(const UsageQuery& query);

  const std::string& path() const { return db_->path(); }

 private:
  explicit UsageLedger(std::unique_ptr<SqlDatabase> db) : db_(std::move(db)) {}
  // Under mutex_: the INSERT of one record.
  Result<bool> insert(const UsageRecord& record);

  // One connection for every HTTP thread: a record is one small INSERT, so a mutex is enough.
  std::mutex mutex_;
  std::unique_ptr<SqlDatabase> db_;
  std::deque<UsageRecord> pending_;  // not written yet: the database was unreachable
};

}  // namespace tachyon::gateway
