#include "gateway/postgres_database.h"

#include <libpq-fe.h>

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

namespace tachyon::gateway {
namespace {

// SQLSTATE class 23 (integrity constraint) → a kInvalidArgument tagged as a constraint failure;
// class 08 (connection) and 57P (server shutting down) → kUnavailable; the rest kIoError.
Status status_of(pg_result* result, pg_conn* connection, std::string_view what) {
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = result ? PQresultErrorMessage(result) : PQerrorMessage(connection);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  message = fmt::format("{}: {}", what, message);
  const std::string_view code = state ? state : "";
  if (code.starts_with("23")) return invalid_argument(fmt::format("{} ({})", message, kConstraintTag));
  if (code.empty() || code.starts_with("08") || code.starts_with("57P")) {
    return unavailable(message);
  }
  return io_error(message);
}

// ?, ?, ? → $1, $2, $3 (our statements have no '?' inside literals).
std::string number_placeholders(std::string_view sql) {
  std::string out;
  int next = 1;
  for (char c : sql) {
    if (c == '?') {
      out += '$';
      out += std::to_string(next++);
    } else {
      out += c;
    }
  }
  return out;
}

// postgresql://user:secret@host/db → postgresql://user:***@host/db
std::string without_password(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t at = url.find('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos) return std::string(url);
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return fmt::format("{}:***{}", url.substr(0, colon), url.substr(at));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;
}

class PostgresStatement : public SqlStatement {
 public:
  PostgresStatement(PostgresDatabase& db, std::string sql) : db_(db), sql_(std::move(sql)) {}
  ~PostgresStatement() override {
    if (result_) PQclear(result_);
  }

  PostgresStatement& bind(int index, int64_t value) override {
    return set(index, std::to_string(value), false);
  }
  PostgresStatement& bind(int index, double value) override {
    return set(index, fmt::format("{}", value), false);
  }
  PostgresStatement& bind(int index, std::string_view text) override {
    return set(index, std::string(text), false);
  }
  PostgresStatement& bind_blob(int index, const void* data, size_t size) override {
    return set(index, std::string(static_cast<const char*>(data), size), true);
  }
  PostgresStatement& bind_null(int index) override {
    if (index >= 1) {
      grow(index);
      values_[index - 1].reset();
    }
    return *this;
  }

  Result<bool> step() override {
    if (!executed_) {
      executed_ = true;
      TACHYON_ASSIGN_OR_RETURN(result_, db_.run(sql_, values_, binary_));
      row_ = -1;
    }
    if (result_ == nullptr || PQresultStatus(result_) != PGRES_TUPLES_OK) return false;
    ++row_;
    return row_ < PQntuples(result_);
  }

  int64_t column_int64(int index) const override {
    const std::string text = column_text(index);
    int64_t value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value);
    return value;
  }
  double column_double(int index) const override { return std::strtod(column_text(index).c_str(), nullptr); }
  std::string column_text(int index) const override {
    return std::string(PQgetvalue(result_, row_, index),
                       static_cast<size_t>(PQgetlength(result_, row_, index)));
  }
  std::string column_blob(int index) const override {
    const std::string text = column_text(index);  // bytea as \x0a1b...
    std::string bytes;
    if (!text.starts_with("\\x")) return text;
    for (size_t i = 2; i + 1 < text.size(); i += 2) {
      bytes += static_cast<char>(hex_value(text[i]) * 16 + hex_value(text[i + 1]));
    }
    return bytes;
  }
  bool column_is_null(int index) const override { return PQgetisnull(result_, row_, index) != 0; }

 private:
  void grow(int index) {
    if (static_cast<int>(values_.size()) < index) {
      values_.resize(static_cast<size_t>(index));
      binary_.resize(static_cast<size_t>(index), false);
    }
  }
  PostgresStatement& set(int index, std::string value, bool binary) {
    if (index >= 1) {
      grow(index);
      values_[index - 1] = std::move(value);
      binary_[index - 1] = binary;
    }
    return *this;
  }

  PostgresDatabase& db_;
  const std::string sql_;
  std::vector<std::optional<std::string>> values_;
  std::vector<bool> binary_;
  bool executed_ = false;
  pg_result* result_ = nullptr;
  int row_ = -1;
};

}  // namespace

Result<std::unique_ptr<PostgresDatabase>> PostgresDatabase::open(const std::string& url) {
  pg_conn* connection = PQconnectdb(url.c_str());
  const std::string display = without_password(url);
  if (connection == nullptr || PQstatus(connection) != CONNECTION_OK) {
    std::string why = connection ? PQerrorMessage(connection) : "out of memory";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (connection) PQfinish(connection);
    return unavailable(fmt::format("cannot connect to {}: {}", display, why));
  }
  std::unique_ptr<PostgresDatabase> db(new PostgresDatabase(connection, display));
  // Our own messages say what failed; the server's NOTICEs ("relation exists, skipping") are
  // noise on stderr.
  PQsetNoticeProcessor(connection, [](void*, const char*) {}, nullptr);
  return db;
}

PostgresDatabase::~PostgresDatabase() { PQfinish(connection_); }

Status PostgresDatabase::ensure_connected() {
  if (PQstatus(connection_) == CONNECTION_OK) return Status::ok_status();
  PQreset(connection_);
  if (PQstatus(connection_) == CONNECTION_OK) return Status::ok_status();
  return status_of(nullptr, connection_, fmt::format("reconnecting to {}", display_url_));
}

Result<pg_result*> PostgresDatabase::run(const std::string& sql,
                                         const std::vector<std::optional<std::string>>& values,
                                         const std::vector<bool>& binary) {
  std::vector<const char*> pointers;
  std::vector<int> lengths, formats;
  for (size_t i = 0; i < values.size(); ++i) {
    pointers.push_back(values[i] ? values[i]->data() : nullptr);
    lengths.push_back(values[i] ? static_cast<int>(values[i]->size()) : 0);
    formats.push_back(binary[i] ? 1 : 0);
  }
  // Once more after a reset when the connection broke outside a transaction (the server
  // restarted): the statement never ran, so running it again is safe.
  for (int attempt = 0;; ++attempt) {
    TACHYON_RETURN_IF_ERROR(ensure_connected());
    // Without parameters PQexec, which also takes several statements (a migration).
    pg_result* result =
        values.empty() ? PQexec(connection_, sql.c_str())
                       : PQexecParams(connection_, sql.c_str(), static_cast<int>(values.size()),
                                      nullptr, pointers.data(), lengths.data(), formats.data(), 0);
    const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
    Status error = status_of(result, connection_, "postgresql");
    if (result) PQclear(result);
    const bool broken = PQstatus(connection_) != CONNECTION_OK;
    if (broken && attempt == 0 && !in_transaction_) continue;
    if (broken) in_transaction_ = false;
    return error;
  }
}

Status PostgresDatabase::execute(const char* sql) {
  const std::string_view text(sql);
  Result<pg_result*> result = run(sql, {}, {});
  if (!result.ok()) return result.status();
  PQclear(*result);
  if (text.starts_with("BEGIN")) in_transaction_ = true;
  if (text.starts_with("COMMIT") || text.starts_with("ROLLBACK")) in_transaction_ = false;
  return Status::ok_status();
}

Result<std::unique_ptr<SqlStatement>> PostgresDatabase::prepare(std::string_view sql) {
  return std::unique_ptr<SqlStatement>(
      std::make_unique<PostgresStatement>(*this, number_placeholders(sql)));
}

}  // namespace tachyon::gateway
