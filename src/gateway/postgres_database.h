// PostgresDatabase: the SqlDatabase of replicas on several machines (`--db postgresql://...`),
// on libpq. `?` placeholders become $1, $2, ...; parameters go as text (blobs as binary), rows
// come back as text (bytea decoded from hex). A connection that broke (the server restarted)
// is reset and the statement tried once more; statements inside an explicit transaction are
// not retried.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/sql_database.h"

struct pg_conn;
struct pg_result;

namespace tachyon::gateway {

class PostgresDatabase : public SqlDatabase {
 public:
  static Result<std::unique_ptr<PostgresDatabase>> open(const std::string& url);
  ~PostgresDatabase() override;
  PostgresDatabase(const PostgresDatabase&) = delete;
  PostgresDatabase& operator=(const PostgresDatabase&) = delete;

  Status execute(const char* sql) override;
  Result<std::unique_ptr<SqlStatement>> prepare(std::string_view sql) override;
  const std::string& path() const override { return display_url_; }
  SqlDialect dialect() const override { return SqlDialect::kPostgres; }

  // Runs `sql` ($n placeholders) with `values` (nullopt: NULL; `binary[i]`: raw bytes).
  Result<pg_result*> run(const std::string& sql, const std::vector<std::optional<std::string>>& values,
                         const std::vector<bool>& binary);

 private:
  PostgresDatabase(pg_conn* connection, std::string display_url)
      : connection_(connection), display_url_(std::move(display_url)) {}
  // The connection is usable (reset when it broke); why not otherwise.
  Status ensure_connected();

  pg_conn* connection_;
  std::string display_url_;
  bool in_transaction_ = false;  // BEGIN seen, COMMIT/ROLLBACK not yet
};

}  // namespace tachyon::gateway
