// `tachyon keys create|list|update|revoke`: API keys for `tachyon serve` in SQLite
// (--db, default $TACHYON_HOME/tachyon.db). A key's secret is printed once, by create.
#include <charconv>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli/commands.h"
#include "core/paths.h"
#include "gateway/key_store.h"

namespace tachyon::cli {
namespace {

using gateway::ApiKey;
using gateway::KeyPolicy;
using gateway::KeyPolicyChange;
using gateway::KeyStore;

// Limit flags as text, so a bad value gets our one-line error instead of CLI11's.
struct PolicyFlags {
  std::string tier, rpm, tpm, concurrency, daily_tokens, monthly_tokens, max_tokens, models;
  CLI::Option *tier_option = nullptr, *rpm_option = nullptr, *tpm_option = nullptr,
              *concurrency_option = nullptr, *daily_option = nullptr, *monthly_option = nullptr,
              *max_tokens_option = nullptr, *models_option = nullptr;
};

void add_policy_flags(CLI::App& command, PolicyFlags& flags) {
  flags.tier_option = command.add_option(
      "--tier", flags.tier,
      "free (20 rpm, 40000 tpm, 2 concurrent), standard (300, 400000, 16; the default) or "
      "priority (3000, 4000000, 64); other flags override");
  flags.rpm_option = command.add_option("--rpm", flags.rpm, "Requests per minute, 0 = unlimited");
  flags.tpm_option = command.add_option("--tpm", flags.tpm,
                                        "Tokens per minute (prompt + max_tokens), 0 = unlimited");
  flags.concurrency_option =
      command.add_option("--concurrency", flags.concurrency, "Requests at once, 0 = unlimited");
  flags.daily_option =
      command.add_option("--daily-tokens", flags.daily_tokens, "Tokens per UTC day, 0 = unlimited");
  flags.monthly_option = command.add_option("--monthly-tokens", flags.monthly_tokens,
                                            "Tokens per UTC month, 0 = unlimited");
  flags.max_tokens_option = command.add_option("--max-tokens", flags.max_tokens,
                                               "Cap on a request's max_tokens, 0 = none");
  flags.models_option = command.add_option("--models", flags.models,
                                           "Comma-separated models the key may use (\"\" = all)");
}

Result<int64_t> parse_limit(const char* flag, const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end || value < 0) {
    return invalid_argument(fmt::format("{} must be a whole number >= 0, got '{}'", flag, text));
  }
  return value;
}

Result<KeyPolicyChange> parse_policy_flags(const PolicyFlags& flags) {
  KeyPolicyChange change;
  if (flags.tier_option->count() > 0) {
    Result<gateway::Tier> tier = gateway::parse_tier(flags.tier);
    if (!tier.ok()) {
      return invalid_argument(
          fmt::format("--tier must be free, standard or priority, got '{}'", flags.tier));
    }
    change.tier = *tier;
  }
  const std::tuple<CLI::Option*, const char*, const std::string*, std::optional<int64_t>*>
      limits[] = {
          {flags.rpm_option, "--rpm", &flags.rpm, &change.requests_per_minute},
          {flags.tpm_option, "--tpm", &flags.tpm, &change.tokens_per_minute},
          {flags.concurrency_option, "--concurrency", &flags.concurrency,
           &change.max_concurrent_requests},
          {flags.daily_option, "--daily-tokens", &flags.daily_tokens, &change.daily_tokens},
          {flags.monthly_option, "--monthly-tokens", &flags.monthly_tokens, &change.monthly_tokens},
          {flags.max_tokens_option, "--max-tokens", &flags.max_tokens, &change.max_tokens},
      };
  for (const auto& [option, flag, text, target] : limits) {
    if (option->count() == 0) continue;
    TACHYON_ASSIGN_OR_RETURN(*target, parse_limit(flag, *text));
  }
  if (flags.models_option->count() > 0) change.models = gateway::split_models(flags.models);
  return change;
}

std::string utc_time(int64_t unix_seconds) {
  const auto time = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&time, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

boost::json::object key_to_json(const ApiKey& key) {
  boost::json::array models;
  for (const std::string& model : key.policy.models) models.emplace_back(model);
  return {
      {"id", key.id},
      {"name", key.name},
      {"tier", gateway::tier_name(key.policy.tier)},
      {"rpm", key.policy.requests_per_minute},
      {"tpm", key.policy.tokens_per_minute},
      {"concurrency", key.policy.max_concurrent_requests},
      {"daily_tokens", key.policy.daily_tokens},
      {"monthly_tokens", key.policy.monthly_tokens},
      {"max_tokens", key.policy.max_tokens},
      {"models", std::move(models)},
      {"hint", key.hint},
      {"created", utc_time(key.created_unix)},
      {"revoked", key.revoked()},
      {"revoked_at", key.revoked_unix ? boost::json::value(utc_time(*key.revoked_unix))
                                      : boost::json::value(nullptr)},
  };
}

std::string limit_text(int64_t value) {
  return value > 0 ? std::to_string(value) : "-";
}

std::string policy_summary(const KeyPolicy& policy) {
  return fmt::format(
      "tier {}: rpm {}, tpm {}, concurrency {}, daily tokens {}, monthly tokens {}, "
      "max_tokens {}, models {}",
      gateway::tier_name(policy.tier), limit_text(policy.requests_per_minute),
      limit_text(policy.tokens_per_minute), limit_text(policy.max_concurrent_requests),
      limit_text(policy.daily_tokens), limit_text(policy.monthly_tokens),
      limit_text(policy.max_tokens),
      policy.models.empty() ? "all" : gateway::join_models(policy.models));
}

void print_json(const boost::json::value& value) {
  std::printf("%s\n", boost::json::serialize(value).c_str());
}

// kExisting: only `create` may make a database; a typo in --db should not make an empty one.
Result<std::unique_ptr<KeyStore>> open_store(const std::string& path, gateway::OpenMode mode) {
  Result<std::unique_ptr<KeyStore>> store = KeyStore::open(path, mode);
  if (store.status().code() == StatusCode::kNotFound) {
    return not_found(fmt::format("{} (create a key first with `tachyon keys create`)",
                                 store.status().message()));
  }
  return store;
}

void print_table(const std::vector<ApiKey>& keys) {
  if (keys.empty()) {
    std::printf("no keys\n");
    return;
  }
  std::printf("%-4s %-20s %-9s %6s %9s %5s %10s %10s %10s %-16s %-15s %-10s %s\n", "ID", "NAME",
              "TIER", "RPM", "TPM", "CONC", "DAILY", "MONTHLY", "MAX_TOKENS", "MODELS", "KEY",
              "CREATED", "STATUS");
  for (const ApiKey& key : keys) {
    const KeyPolicy& p = key.policy;
    std::printf("%-4lld %-20s %-9s %6s %9s %5s %10s %10s %10s %-16s %-15s %-10s %s\n",
                static_cast<long long>(key.id), key.name.c_str(), gateway::tier_name(p.tier),
                limit_text(p.requests_per_minute).c_str(), limit_text(p.tokens_per_minute).c_str(),
                limit_text(p.max_concurrent_requests).c_str(), limit_text(p.daily_tokens).c_str(),
                limit_text(p.monthly_tokens).c_str(), limit_text(p.max_tokens).c_str(),
                p.models.empty() ? "all" : gateway::join_models(p.models).c_str(), key.hint.c_str(),
                utc_time(key.created_unix).substr(0, 10).c_str(),
                key.revoked() ? "revoked" : "active");
  }
}

struct KeysOptions {
  std::string db = default_database_path();
  std::string name;  // create: --name; update/revoke: NAME|ID
  bool json = false;
  PolicyFlags flags;
};

void add_create(CLI::App& keys) {
  auto options = std::make_shared<KeysOptions>();
  CLI::App* command = keys.add_subcommand("create", "Create a key; prints its secret once");
  command->add_option("--name", options->name, "Unique name (letters, digits, . _ -)");
  add_policy_flags(*command, options->flags);
  command->add_option("--db", options->db, "Database: a SQLite file (default $TACHYON_HOME/tachyon.db) or postgresql://...");
  command->add_flag("--json", options->json, "Print {\"id\", \"name\", \"key\", ...} as JSON");
  command->callback([options] {
    if (options->name.empty()) return fail("keys create needs --name NAME");
    Result<KeyPolicyChange> change = parse_policy_flags(options->flags);
    if (!change.ok()) return fail(change.status().message());
    const KeyPolicy policy = gateway::apply_change(
        gateway::tier_defaults(change->tier.value_or(gateway::Tier::kStandard)), *change);
    Result<std::unique_ptr<KeyStore>> store = open_store(options->db, gateway::OpenMode::kCreate);
    if (!store.ok()) return fail(store.status().message());
    Result<gateway::CreatedKey> created = (*store)->create(options->name, policy);
    if (!created.ok()) return fail(created.status().message());
    if (options->json) {
      boost::json::object object = key_to_json(created->key);
      object["key"] = created->secret;
      return print_json(object);
    }
    std::printf("created key %s (id %lld, %s)\n%s\n", created->key.name.c_str(),
                static_cast<long long>(created->key.id), policy_summary(policy).c_str(),
                created->secret.c_str());
    std::fprintf(stderr, "this is the only time the key is shown; tachyon keeps only its hash\n");
  });
}

void add_list(CLI::App& keys) {
  auto options = std::make_shared<KeysOptions>();
  CLI::App* command = keys.add_subcommand("list", "List keys (never their secrets)");
  command->add_option("--db", options->db, "Database: a SQLite file (default $TACHYON_HOME/tachyon.db) or postgresql://...");
  command->add_flag("--json", options->json, "Print a JSON array");
  command->callback([options] {
    Result<std::unique_ptr<KeyStore>> store = open_store(options->db, gateway::OpenMode::kExisting);
    if (!store.ok()) return fail(store.status().message());
    Result<std::vector<ApiKey>> keys = (*store)->list();
    if (!keys.ok()) return fail(keys.status().message());
    if (!options->json) return print_table(*keys);
    boost::json::array array;
    for (const ApiKey& key : *keys) array.push_back(key_to_json(key));
    print_json(array);
  });
}

void add_update(CLI::App& keys) {
  auto options = std::make_shared<KeysOptions>();
  CLI::App* command = keys.add_subcommand(
      "update", "Change a key's limits (a new --tier resets rpm, tpm and concurrency first)");
  command->add_option("key", options->name, "NAME or ID")->required();
  add_policy_flags(*command, options->flags);
  command->add_option("--db", options->db, "Database: a SQLite file (default $TACHYON_HOME/tachyon.db) or postgresql://...");
  command->add_flag("--json", options->json, "Print the updated key as JSON");
  command->callback([options] {
    Result<KeyPolicyChange> change = parse_policy_flags(options->flags);
    if (!change.ok()) return fail(change.status().message());
    Result<std::unique_ptr<KeyStore>> store = open_store(options->db, gateway::OpenMode::kExisting);
    if (!store.ok()) return fail(store.status().message());
    Result<ApiKey> key = (*store)->update(options->name, *change);
    if (!key.ok()) return fail(key.status().message());
    if (options->json) return print_json(key_to_json(*key));
    std::printf("updated key %s (id %lld, %s)\n", key->name.c_str(),
                static_cast<long long>(key->id), policy_summary(key->policy).c_str());
  });
}

void add_revoke(CLI::App& keys) {
  auto options = std::make_shared<KeysOptions>();
  CLI::App* command = keys.add_subcommand(
      "revoke", "Revoke a key (running servers refuse it within about a second)");
  command->add_option("key", options->name, "NAME or ID")->required();
  command->add_option("--db", options->db, "Database: a SQLite file (default $TACHYON_HOME/tachyon.db) or postgresql://...");
  command->add_flag("--json", options->json, "Print the revoked key as JSON");
  command->callback([options] {
    Result<std::unique_ptr<KeyStore>> store = open_store(options->db, gateway::OpenMode::kExisting);
    if (!store.ok()) return fail(store.status().message());
    Result<ApiKey> key = (*store)->revoke(options->name);
    if (!key.ok()) return fail(key.status().message());
    if (options->json) return print_json(key_to_json(*key));
    std::printf("revoked key %s (id %lld)\n", key->name.c_str(), static_cast<long long>(key->id));
  });
}

}  // namespace

void add_keys_command(CLI::App& app) {
  CLI::App* keys = app.add_subcommand("keys", "Manage API keys for `tachyon serve`");
  keys->require_subcommand(1);
  add_create(*keys);
  add_list(*keys);
  add_update(*keys);
  add_revoke(*keys);
}

}  // namespace tachyon::cli
