// SqliteDatabase: one SQLite connection (WAL, busy timeout) and SqliteStatement, a prepared
// statement with chained binds. Not thread-safe: KeyStore and UsageLedger each guard theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tachyon::gateway {

enum class OpenMode {
  kCreate,    // create the file (and its folder) when missing
  kExisting,  // kNotFound when the file is missing: read commands should not create databases
};

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, sqlite3_stmt* statement) : db_(db), statement_(statement) {}
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  SqliteStatement(const SqliteStatement&) = delete;
  ~SqliteStatement();

  // Parameters are 1-based. A failed bind is reported by the next step().
  SqliteStatement& bind(int index, int64_t value);
  SqliteStatement& bind(int index, double value);
  SqliteStatement& bind(int index, std::string_view text);
  SqliteStatement& bind_blob(int index, const void* data, size_t size);
  SqliteStatement& bind_null(int index);

  // true: a row is ready; false: done.
  Result<bool> step();
  // step() until done; for INSERT/UPDATE.
  Status run();

  int64_t column_int64(int index) const;  // 0-based columns
  double column_double(int index) const;
  std::string column_text(int index) const;
  std::string column_blob(int index) const;
  bool column_is_null(int index) const;

 private:
  void note_bind(int rc);

  sqlite3* db_;
  sqlite3_stmt* statement_;
  int bind_error_ = 0;  // first failing sqlite result code from a bind
};

class SqliteDatabase {
 public:
  static Result<std::unique_ptr<SqliteDatabase>> open(const std::string& path, OpenMode mode);
  ~SqliteDatabase();
  SqliteDatabase(const SqliteDatabase&) = delete;
  SqliteDatabase& operator=(const SqliteDatabase&) = delete;

  // Runs one or more statements that return no rows.
  Status execute(const char* sql);
  Result<SqliteStatement> prepare(std::string_view sql);

  int64_t last_insert_rowid() const;
  int changes() const;  // rows touched by the last INSERT/UPDATE/DELETE
  const std::string& path() const { return path_; }

 private:
  SqliteDatabase(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
};

// Whether a Status came from a UNIQUE/PRIMARY KEY violation.
bool is_constraint_violation(const Status& status);

}  // namespace tachyon::gateway
