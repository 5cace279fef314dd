#include "gateway/sql_database.h"

#include <chrono>

#include <fmt/format.h>

#include "gateway/postgres_database.h"
#include "gateway/sqlite_database.h"

namespace tachyon::gateway {

Status SqlStatement::run() {
  while (true) {
    Result<bool> row = step();
    if (!row.ok()) return row.status();
    if (!*row) return Status::ok_status();
  }
}

bool is_postgres_url(std::string_view path_or_url) {
  return path_or_url.starts_with("postgresql://") || path_or_url.starts_with("postgres://");
}

Result<std::unique_ptr<SqlDatabase>> open_database(const std::string& path_or_url,
                                                   OpenMode mode) {
  if (is_postgres_url(path_or_url)) {
    TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<PostgresDatabase> db,
                             PostgresDatabase::open(path_or_url));
    return std::unique_ptr<SqlDatabase>(std::move(db));
  }
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDatabase> db,
                           SqliteDatabase::open(path_or_url, mode));
  return std::unique_ptr<SqlDatabase>(std::move(db));
}

Status migrate(SqlDatabase& db, std::string_view component,
               const std::vector<Migration>& migrations) {
  TACHYON_RETURN_IF_ERROR(db.execute(
      "CREATE TABLE IF NOT EXISTS schema_migrations (component TEXT NOT NULL, "
      "version INTEGER NOT NULL, applied_unix BIGINT NOT NULL, PRIMARY KEY (component, version))"));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const Migration& migration : migrations) {
    // Each in a transaction that re-checks the version, so two processes starting at once
    // apply it once (the second waits for the first's lock, then finds it done).
    TACHYON_RETURN_IF_ERROR(db.execute(db.dialect() == SqlDialect::kSqlite ? "BEGIN IMMEDIATE"
                                                                            : "BEGIN"));
    if (db.dialect() == SqlDialect::kPostgres) {
      (void)db.execute("LOCK TABLE schema_migrations IN EXCLUSIVE MODE");
    }
    auto abort = [&](Status status) {
      (void)db.execute("ROLLBACK");
      return io_error(fmt::format("{}: migration {} of {}: {}", db.path(), migration.version,
                                  component, status.message()));
    };
    Result<std::unique_ptr<SqlStatement>> select = db.prepare(
        "SELECT COUNT(*) FROM schema_migrations WHERE component = ? AND version = ?");
    if (!select.ok()) return abort(select.status());
    (*select)->bind(1, component).bind(2, static_cast<int64_t>(migration.version));
    Result<bool> row = (*select)->step();
    if (!row.ok()) return abort(row.status());
    const bool applied = *row && (*select)->column_int64(0) > 0;
    select->reset();
    if (!applied) {
      const char* sql = db.dialect() == SqlDialect::kSqlite ? migration.sqlite : migration.postgres;
      if (Status status = db.execute(sql); !status.ok()) return abort(status);
      Result<std::unique_ptr<SqlStatement>> insert = db.prepare(
          "INSERT INTO schema_migrations (component, version, applied_unix) VALUES (?, ?, ?)");
      if (!insert.ok()) return abort(insert.status());
      (*insert)->bind(1, component).bind(2, static_cast<int64_t>(migration.version)).bind(3, now);
      if (Status status = (*insert)->run(); !status.ok()) return abort(status);
    }
    TACHYON_RETURN_IF_ERROR(db.execute("COMMIT"));
  }
  return Status::ok_status();
}

bool is_constraint_violation(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument &&
         status.message().find(kConstraintTag) != std::string::npos;
}

std::string sql_utc_day(SqlDialect dialect, std::string_view column) {
  if (dialect == SqlDialect::kSqlite) return fmt::format("strftime('%Y-%m-%d', {}, 'unixepoch')", column);
  return fmt::format("to_char(to_timestamp({}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')", column);
}

}  // namespace tachyon::gateway
