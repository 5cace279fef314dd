// SqlDatabase and SqlStatement: what KeyStore and UsageLedger need from a database, so that the
// same code runs on SQLite (one server: a file) and PostgreSQL (replicas on several machines:
// `--db postgresql://...`). Statements use `?` placeholders on both (PostgreSQL's are
// numbered for it) and SQL both understand; what differs has a dialect function below.
// Neither is thread-safe: KeyStore and UsageLedger each guard theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tachyon::gateway {

enum class OpenMode {
  kCreate,    // create the file (and its folder) when missing
  kExisting,  // kNotFound when the file is missing: read commands should not create databases
};

enum class SqlDialect { kSqlite, kPostgres };

class SqlStatement {
 public:
  virtual ~SqlStatement() = default;
  // Parameters are 1-based. A failed bind is reported by the next step().
  virtual SqlStatement& bind(int index, int64_t value) = 0;
  virtual SqlStatement& bind(int index, double value) = 0;
  virtual SqlStatement& bind(int index, std::string_view text) = 0;
  virtual SqlStatement& bind_blob(int index, const void* data, size_t size) = 0;
  virtual SqlStatement& bind_null(int index) = 0;

  // true: a row is ready; false: done.
  virtual Result<bool> step() = 0;
  // step() until done; for INSERT/UPDATE.
  Status run();

  virtual int64_t column_int64(int index) const = 0;  // 0-based columns
  virtual double column_double(int index) const = 0;
  virtual std::string column_text(int index) const = 0;
  virtual std::string column_blob(int index) const = 0;
  virtual bool column_is_null(int index) const = 0;
};

class SqlDatabase {
 public:
  virtual ~SqlDatabase() = default;
  // Runs one or more statements that return no rows.
  virtual Status execute(const char* sql) = 0;
  virtual Result<std::unique_ptr<SqlStatement>> prepare(std::string_view sql) = 0;
  // The file, or the URL without its password: for messages.
  virtual const std::string& path() const = 0;
  virtual SqlDialect dialect() const = 0;
};

// A path opens SQLite; postgresql:// or postgres:// (libpq's URI) opens PostgreSQL.
Result<std::unique_ptr<SqlDatabase>> open_database(const std::string& path_or_url,
                                                   OpenMode mode);
bool is_postgres_url(std::string_view path_or_url);

// One schema change of a component, as SQL for each dialect.
struct Migration {
  int version;
  const char* sqlite;
  const char* postgres;
};
// Applies, in order and each in its own transaction, the migrations of `component` that the
// database has not had yet (table schema_migrations(component, version, applied_unix)).
Status migrate(SqlDatabase& db, std::string_view component,
               const std::vector<Migration>& migrations);

// Whether a Status came from a UNIQUE/PRIMARY KEY violation.
bool is_constraint_violation(const Status& status);
// Marks constraint failures in messages so callers can tell a duplicate from a broken disk.
inline constexpr std::string_view kConstraintTag = "constraint failed";

// "YYYY-MM-DD" (UTC) of a unix-seconds column, in the database's SQL.
std::string sql_utc_day(SqlDialect dialect, std::string_view column);

}  // namespace tachyon::gateway
