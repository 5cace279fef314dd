// SqliteDatabase: one SQLite connection (WAL, busy timeout) and SqliteStatement, a prepared
// statement with chained binds: the SqlDatabase of one server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gateway/sql_database.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tachyon::gateway {

class SqliteStatement : public SqlStatement {
 public:
  SqliteStatement(sqlite3* db, sqlite3_stmt* statement) : db_(db), statement_(statement) {}
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  ~SqliteStatement() override;

  SqliteStatement& bind(int index, int64_t value) override;
  SqliteStatement& bind(int index, double value) override;
  SqliteStatement& bind(int index, std::string_view text) override;
  SqliteStatement& bind_blob(int index, const void* data, size_t size) override;
  SqliteStatement& bind_null(int index) override;
  Result<bool> step() override;

  int64_t column_int64(int index) const override;
  double column_double(int index) const override;
  std::string column_text(int index) const override;
  std::string column_blob(int index) const override;
  bool column_is_null(int index) const override;

 private:
  void note_bind(int rc);

  sqlite3* db_;
  sqlite3_stmt* statement_;
  int bind_error_ = 0;  // first failing sqlite result code from a bind
};

class SqliteDatabase : public SqlDatabase {
 public:
  static Result<std::unique_ptr<SqliteDatabase>> open(const std::string& path, OpenMode mode);
  ~SqliteDatabase() override;
  SqliteDatabase(const SqliteDatabase&) = delete;
  SqliteDatabase& operator=(const SqliteDatabase&) = delete;

  Status execute(const char* sql) override;
  Result<std::unique_ptr<SqlStatement>> prepare(std::string_view sql) override;
  const std::string& path() const override { return path_; }
  SqlDialect dialect() const override { return SqlDialect::kSqlite; }

 private:
  SqliteDatabase(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
};

}  // namespace tachyon::gateway
