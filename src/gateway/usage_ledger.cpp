#include "gateway/usage_ledger.h"

#include <chrono>

#include <fmt/format.h>

namespace tachyon::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS usage (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id TEXT NOT NULL UNIQUE,
  unix_time INTEGER NOT NULL,
  key_id INTEGER NOT NULL,
  key_name TEXT NOT NULL,
  model TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  cached_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  queue_seconds REAL NOT NULL,
  ttft_seconds REAL NOT NULL,
  duration_seconds REAL NOT NULL,
  status TEXT NOT NULL,
  finish_reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_key_time ON usage(key_id, unix_time);
)sql";

}  // namespace

Result<std::unique_ptr<UsageLedger>> UsageLedger::open(const std::string& path, OpenMode mode) {
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDatabase> db, SqliteDatabase::open(path, mode));
  Status status = db->execute(kSchema);
  if (!status.ok()) return io_error(fmt::format("{}: {}", path, status.message()));
  return std::unique_ptr<UsageLedger>(new UsageLedger(std::move(db)));
}

Result<bool> UsageLedger::record(const UsageRecord& record) {
  if (record.request_id.empty()) return invalid_argument("a usage record needs a request_id");
  const int64_t unix_time = record.unix_time != 0
                                ? record.unix_time
                                : std::chrono::duration_cast<std::chrono::seconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count();
  std::lock_guard lock(mutex_);
  // Autocommit: the INSERT is its own transaction, durable when step() returns.
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement insert,
      db_->prepare("INSERT OR IGNORE INTO usage (request_id, unix_time, key_id, key_name, model, "
                   "prompt_tokens, cached_tokens, completion_tokens, queue_seconds, ttft_seconds, "
                   "duration_seconds, status, finish_reason) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  insert.bind(1, std::string_view(record.request_id))
      .bind(2, unix_time)
      .bind(3, record.key_id)
      .bind(4, std::string_view(record.key_name))
      .bind(5, std::string_view(record.model))
      .bind(6, record.prompt_tokens)
      .bind(7, record.cached_tokens)
      .bind(8, record.completion_tokens)
      .bind(9, record.queue_seconds)
      .bind(10, record.ttft_seconds)
      .bind(11, record.duration_seconds)
      .bind(12, std::string_view(record.status))
      .bind(13, std::string_view(record.finish_reason));
  TACHYON_RETURN_IF_ERROR(insert.run());
  return db_->changes() > 0;
}

Result<int64_t> UsageLedger::tokens_since(int64_t key_id, int64_t since_unix) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db_->prepare("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage "
                   "WHERE key_id = ? AND unix_time >= ?"));
  select.bind(1, key_id).bind(2, since_unix);
  TACHYON_ASSIGN_OR_RETURN(bool row, select.step());
  return row ? select.column_int64(0) : 0;
}

Result<std::vector<UsageSummary>> UsageLedger::summarize(const UsageQuery& query) {
  const char* group = query.group_by == UsageGrouping::kDay
                          ? "strftime('%Y-%m-%d', unix_time, 'unixepoch')"
                          : "key_name";
  std::string where = "WHERE 1";
  if (query.key_name) where += " AND key_name = ?";
  if (query.since_unix) where += " AND unix_time >= ?";
  const std::string sql = fmt::format(
      "SELECT {0}, COUNT(*), SUM(prompt_tokens), SUM(cached_tokens), SUM(completion_tokens), "
      "SUM(status = 'error'), SUM(status = 'cancelled'), SUM(status = 'rejected') "
      "FROM usage {1} GROUP BY {0} ORDER BY {0}",
      group, where);
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(SqliteStatement select, db_->prepare(sql));
  int index = 1;
  if (query.key_name) select.bind(index++, std::string_view(*query.key_name));
  if (query.since_unix) select.bind(index++, *query.since_unix);
  std::vector<UsageSummary> rows;
  while (true) {
    TACHYON_ASSIGN_OR_RETURN(bool row, select.step());
    if (!row) break;
    UsageSummary summary;
    summary.group = select.column_text(0);
    summary.requests = select.column_int64(1);
    summary.prompt_tokens = select.column_int64(2);
    summary.cached_tokens = select.column_int64(3);
    summary.completion_tokens = select.column_int64(4);
    summary.errors = select.column_int64(5);
    summary.cancelled = select.column_int64(6);
    summary.rejected = select.column_int64(7);
    rows.push_back(std::move(summary));
  }
  return rows;
}

}  // namespace tachyon::gateway
