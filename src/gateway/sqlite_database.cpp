#include "gateway/sqlite_database.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <sqlite3.h>

namespace tachyon::gateway {
namespace {

Status status_for(int rc, std::string message) {
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
    return unavailable(std::move(message));
  if ((rc & 0xff) == SQLITE_CONSTRAINT) return invalid_argument(std::move(message));
  return io_error(std::move(message));
}

Status sqlite_error(sqlite3* db, int rc, std::string_view what) {
  return status_for(rc, fmt::format("{}: {}", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

}  // namespace

SqliteStatement::~SqliteStatement() {
  if (statement_) sqlite3_finalize(statement_);
}

void SqliteStatement::note_bind(int rc) {
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

SqliteStatement& SqliteStatement::bind(int index, int64_t value) {
  note_bind(sqlite3_bind_int64(statement_, index, value));
  return *this;
}

SqliteStatement& SqliteStatement::bind(int index, double value) {
  note_bind(sqlite3_bind_double(statement_, index, value));
  return *this;
}

SqliteStatement& SqliteStatement::bind(int index, std::string_view text) {
  note_bind(sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()),
                              SQLITE_TRANSIENT));
  return *this;
}

SqliteStatement& SqliteStatement::bind_blob(int index, const void* data, size_t size) {
  note_bind(sqlite3_bind_blob(statement_, index, data, static_cast<int>(size), SQLITE_TRANSIENT));
  return *this;
}

SqliteStatement& SqliteStatement::bind_null(int index) {
  note_bind(sqlite3_bind_null(statement_, index));
  return *this;
}

Result<bool> SqliteStatement::step() {
  if (bind_error_ != 0) return sqlite_error(db_, bind_error_, "binding a parameter");
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_error(db_, rc, "sqlite");
}


int64_t SqliteStatement::column_int64(int index) const {
  return sqlite3_column_int64(statement_, index);
}

double SqliteStatement::column_double(int index) const {
  return sqlite3_column_double(statement_, index);
}

std::string SqliteStatement::column_text(int index) const {
  const unsigned char* text = sqlite3_column_text(statement_, index);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            static_cast<size_t>(sqlite3_column_bytes(statement_, index)))
              : std::string();
}

std::string SqliteStatement::column_blob(int index) const {
  const void* blob = sqlite3_column_blob(statement_, index);
  return blob ? std::string(static_cast<const char*>(blob),
                            static_cast<size_t>(sqlite3_column_bytes(statement_, index)))
              : std::string();
}

bool SqliteStatement::column_is_null(int index) const {
  return sqlite3_column_type(statement_, index) == SQLITE_NULL;
}

Result<std::unique_ptr<SqliteDatabase>> SqliteDatabase::open(const std::string& path,
                                                             OpenMode mode) {
  std::error_code error;
  if (mode == OpenMode::kExisting) {
    if (!std::filesystem::exists(path, error))
      return not_found(fmt::format("no database at {}", path));
  } else {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, error);
    if (error)
      return io_error(fmt::format("cannot create {}: {}", parent.string(), error.message()));
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX;
  if (mode == OpenMode::kCreate) flags |= SQLITE_OPEN_CREATE;
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status status = io_error(fmt::format("cannot open database {}: {}", path,
                                         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return status;
  }
  std::unique_ptr<SqliteDatabase> database(new SqliteDatabase(db, path));
  // Writers from other processes (`tachyon keys`, another server) wait instead of failing.
  sqlite3_busy_timeout(db, 5000);
  // WAL: readers never block the writer. synchronous=NORMAL in WAL mode keeps every committed
  // transaction across a process crash (kill -9); only an OS crash can lose the last few.
  Status status = database->execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (!status.ok()) {
    return io_error(fmt::format("cannot open database {}: {}", path, status.message()));
  }
  return database;
}

SqliteDatabase::~SqliteDatabase() {
  sqlite3_close(db_);
}

Status SqliteDatabase::execute(const char* sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return Status::ok_status();
  Status status = status_for(rc, message ? message : sqlite3_errstr(rc));
  sqlite3_free(message);
  return status;
}

Result<std::unique_ptr<SqlStatement>> SqliteDatabase::prepare(std::string_view sql) {
  sqlite3_stmt* statement = nullptr;
  const int rc =
      sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &statement, nullptr);
  if (rc != SQLITE_OK) return sqlite_error(db_, rc, "preparing a statement");
  return std::unique_ptr<SqlStatement>(std::make_unique<SqliteStatement>(db_, statement));
}

}  // namespace tachyon::gateway
