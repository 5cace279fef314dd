// `tachyon usage [--key NAME] [--since YYYY-MM-DD] [--by day|key] [--json]`: what the usage
// ledger in --db recorded, per key or per UTC day.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli/commands.h"
#include "core/paths.h"
#include "gateway/key_store.h"
#include "gateway/usage_ledger.h"

namespace tachyon::cli {
namespace {

// "YYYY-MM-DD" → the Unix second of that day's 00:00 UTC.
Result<int64_t> parse_day(const std::string& text) {
  const Status bad =
      invalid_argument(fmt::format("--since must be a date YYYY-MM-DD, got '{}'", text));
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return bad;
  int parts[3] = {0, 0, 0};
  const std::pair<size_t, size_t> fields[3] = {{0, 4}, {5, 2}, {8, 2}};
  for (int i = 0; i < 3; ++i) {
    for (size_t j = 0; j < fields[i].second; ++j) {
      const char c = text[fields[i].first + j];
      if (c < '0' || c > '9') return bad;
      parts[i] = parts[i] * 10 + (c - '0');
    }
  }
  const std::chrono::year_month_day day{std::chrono::year(parts[0]),
                                        std::chrono::month(static_cast<unsigned>(parts[1])),
                                        std::chrono::day(static_cast<unsigned>(parts[2]))};
  if (!day.ok()) return bad;
  return static_cast<int64_t>(std::chrono::sys_days(day).time_since_epoch().count()) * 86'400;
}

}  // namespace

void add_usage_command(CLI::App& app) {
  struct Options {
    std::string db = default_database_path();
    std::string key;
    std::string since;
    std::string by = "key";
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("usage", "Report requests and tokens per key or day");
  command->add_option("--db", options->db, "Database: a SQLite file (default $TACHYON_HOME/tachyon.db) or postgresql://...");
  command->add_option("--key", options->key, "Only this key (by name)");
  command->add_option("--since", options->since, "Only from this UTC day on (YYYY-MM-DD)");
  command->add_option("--by", options->by, "Group by key (default) or day");
  command->add_flag("--json", options->json, "Print a JSON array");
  command->callback([options] {
    gateway::UsageQuery query;
    if (options->by == "day") {
      query.group_by = gateway::UsageGrouping::kDay;
    } else if (options->by != "key") {
      return fail(fmt::format("--by must be day or key, got '{}'", options->by));
    }
    if (!options->since.empty()) {
      Result<int64_t> since = parse_day(options->since);
      if (!since.ok()) return fail(since.status().message());
      query.since_unix = *since;
    }
    // Read-only use: a mistyped --db must not leave an empty database behind.
    Result<std::unique_ptr<gateway::KeyStore>> store =
        gateway::KeyStore::open(options->db, gateway::OpenMode::kExisting);
    if (!store.ok()) return fail(store.status().message());
    if (!options->key.empty()) {
      // Static `--api-key` keys (static-N) are not in the store but do have usage.
      if (!options->key.starts_with("static-") && !(*store)->find(options->key).ok()) {
        return fail(fmt::format("no key named '{}'", options->key));
      }
      query.key_name = options->key;
    }
    Result<std::unique_ptr<gateway::UsageLedger>> ledger =
        gateway::UsageLedger::open(options->db, gateway::OpenMode::kExisting);
    if (!ledger.ok()) return fail(ledger.status().message());
    Result<std::vector<gateway::UsageSummary>> rows = (*ledger)->summarize(query);
    if (!rows.ok()) return fail(rows.status().message());

    const char* group = query.group_by == gateway::UsageGrouping::kDay ? "day" : "key";
    if (options->json) {
      boost::json::array array;
      for (const gateway::UsageSummary& row : *rows) {
        array.push_back({{group, row.group},
                         {"requests", row.requests},
                         {"prompt_tokens", row.prompt_tokens},
                         {"cached_tokens", row.cached_tokens},
                         {"completion_tokens", row.completion_tokens},
                         {"total_tokens", row.prompt_tokens + row.completion_tokens},
                         {"errors", row.errors},
                         {"cancelled", row.cancelled},
                         {"rejected", row.rejected}});
      }
      std::printf("%s\n", boost::json::serialize(array).c_str());
      return;
    }
    if (rows->empty()) {
      std::printf("no usage recorded\n");
      return;
    }
    std::printf("%-20s %9s %12s %12s %12s %7s %9s\n", group[0] == 'd' ? "DAY" : "KEY", "REQUESTS",
                "PROMPT", "CACHED", "COMPLETION", "ERRORS", "CANCELLED");
    for (const gateway::UsageSummary& row : *rows) {
      std::printf("%-20s %9lld %12lld %12lld %12lld %7lld %9lld\n", row.group.c_str(),
                  static_cast<long long>(row.requests), static_cast<long long>(row.prompt_tokens),
                  static_cast<long long>(row.cached_tokens),
                  static_cast<long long>(row.completion_tokens), static_cast<long long>(row.errors),
                  static_cast<long long>(row.cancelled));
    }
  });
}

}  // namespace tachyon::cli
