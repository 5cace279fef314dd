#include "gateway/gateway.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gateway/tenant_limiter.h"

namespace tachyon::gateway {
namespace {

// How long a cached key stays valid while the key store cannot be reached.
constexpr std::chrono::seconds kStaleKeyLimit{60};

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
           return lower(x) == lower(y);
         });
}

Status missing_key() {
  return invalid_argument(
      "You didn't provide an API key. You need to provide your API key in an Authorization "
      "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).");
}

}  // namespace

Gateway::Gateway(std::shared_ptr<KeyStore> key_store, const std::vector<std::string>& static_keys,
                 std::shared_ptr<UsageLedger> ledger, GatewayOptions options)
    : key_store_(std::move(key_store)),
      ledger_(std::move(ledger)),
      clock_(std::make_shared<const GatewayClock>(std::move(options.clock))),
      key_cache_ttl_(options.key_cache_ttl),
      shared_limits_(options.shared_limits) {
  for (size_t i = 0; i < static_keys.size(); ++i) {
    Tenant tenant;
    tenant.key_id = -static_cast<int64_t>(i + 1);
    tenant.name = fmt::format("static-{}", i + 1);
    tenant.policy = unlimited_policy();
    static_keys_.push_back({hash_secret(static_keys[i]), std::move(tenant)});
  }
}

Gateway::~Gateway() = default;

Result<std::unique_ptr<Gateway>> Gateway::open(const std::string& db_path,
                                               const std::vector<std::string>& static_keys,
                                               GatewayOptions options) {
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<KeyStore> keys,
                           KeyStore::open(db_path, OpenMode::kCreate));
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<UsageLedger> ledger,
                           UsageLedger::open(db_path, OpenMode::kCreate));
  return std::make_unique<Gateway>(std::move(keys), static_keys, std::move(ledger),
                                   std::move(options));
}

Status Gateway::invalid_key(std::string_view secret) {
  ++authentication_failures_;
  // Only the redacted form: the secret itself is never echoed or logged.
  return not_found(
      fmt::format("Incorrect API key provided: {}. Keys are created with "
                  "`tachyon keys create`.",
                  redact_secret(secret)));
}

Result<Tenant> Gateway::authenticate(std::string_view authorization) {
  const std::string_view value = trim(authorization);
  const size_t space = value.find(' ');
  if (space == std::string_view::npos || !equals_ignoring_case(value.substr(0, space), "bearer")) {
    ++authentication_failures_;
    return missing_key();
  }
  const std::string_view secret = trim(value.substr(space + 1));
  if (secret.empty()) {
    ++authentication_failures_;
    return missing_key();
  }
  const SecretHash hash = hash_secret(secret);

  // Every static key is compared (no early exit), each in constant time.
  const Tenant* static_match = nullptr;
  for (const StaticKey& key : static_keys_) {
    if (hashes_equal(key.hash, hash)) static_match = &key.tenant;
  }
  if (static_match) return *static_match;
  if (!key_store_) return invalid_key(secret);

  // Keys are cached for key_cache_ttl_: asking SQLite each time would funnel every HTTP
  // thread through the store's one connection (and wait out a `tachyon keys` write lock);
  // the TTL bounds how long a revoked or updated key keeps its old state.
  const std::string cache_key(reinterpret_cast<const char*>(hash.data()), hash.size());
  const GatewayClock::TimePoint now = clock_->steady();
  {
    std::lock_guard lock(cache_mutex_);
    auto it = key_cache_.find(cache_key);
    if (it != key_cache_.end() && now - it->second.fetched < key_cache_ttl_)
      return it->second.tenant;
  }
  Result<std::optional<ApiKey>> found = key_store_->find_by_hash(hash);
  if (!found.ok()) {
    // The database is unreachable (PostgreSQL restarting): a key seen recently stays valid
    // for a while, so that a short outage does not refuse everyone.
    if (found.status().code() == StatusCode::kUnavailable) {
      std::lock_guard lock(cache_mutex_);
      auto it = key_cache_.find(cache_key);
      if (it != key_cache_.end() && now - it->second.fetched < kStaleKeyLimit) {
        return it->second.tenant;
      }
    }
    return found.status();
  }
  if (!found->has_value() || (*found)->revoked()) {
    std::lock_guard lock(cache_mutex_);
    key_cache_.erase(cache_key);
    return invalid_key(secret);
  }
  Tenant tenant;
  tenant.key_id = (*found)->id;
  tenant.name = (*found)->name;
  tenant.policy = (*found)->policy;
  std::lock_guard lock(cache_mutex_);
  key_cache_[cache_key] = CachedKey{tenant, now};
  return tenant;
}

std::shared_ptr<TenantLimiter> Gateway::limiter_for(const Tenant& tenant) {
  std::lock_guard lock(limiters_mutex_);
  std::shared_ptr<TenantLimiter>& limiter = limiters_[tenant.key_id];
  if (!limiter)
    limiter = std::make_shared<TenantLimiter>(tenant.key_id, tenant.name, clock_->steady(),
                                              shared_limits_);
  return limiter;
}

AdmitResult Gateway::admit(const Tenant& tenant, std::string_view model, int64_t prompt_tokens,
                           std::optional<int64_t> max_tokens, std::string_view request_id) {
  std::shared_ptr<TenantLimiter> limiter = limiter_for(tenant);
  std::variant<Charge, Rejection> outcome =
      limiter->admit(tenant.policy, model, prompt_tokens, max_tokens, clock_->steady(),
                     clock_->unix_seconds(), ledger_.get());
  if (auto* rejection = std::get_if<Rejection>(&outcome)) {
    if (ledger_ && !request_id.empty() && rejection->reason != kReasonLedgerError) {
      UsageRecord record;
      record.request_id = std::string(request_id);
      record.unix_time = clock_->unix_seconds();
      record.key_id = tenant.key_id;
      record.key_name = tenant.name;
      record.model = std::string(model);
      record.status = "rejected";
      record.finish_reason = rejection->reason;
      Result<bool> written = ledger_->record(record);
      if (!written.ok()) spdlog::error("usage ledger: {}", written.status().message());
    }
    return std::move(*rejection);
  }
  const Charge& charge = std::get<Charge>(outcome);
  return Admission(std::move(limiter), ledger_, clock_, std::string(model), charge.tokens,
                   charge.max_tokens, charge.shared);
}

std::vector<std::pair<std::string, std::string>> Gateway::rate_limit_headers(const Tenant& tenant) {
  if (tenant.policy.requests_per_minute == 0 && tenant.policy.tokens_per_minute == 0) return {};
  return limiter_for(tenant)->headers(tenant.policy, clock_->steady());
}

GatewayMetrics Gateway::metrics() {
  std::vector<std::shared_ptr<TenantLimiter>> limiters;
  {
    std::lock_guard lock(limiters_mutex_);
    for (const auto& [id, limiter] : limiters_) limiters.push_back(limiter);
  }
  // A revoked key and its successor may share a name: one series per name.
  std::map<std::string, TenantCounters> by_name;
  for (const auto& limiter : limiters) {
    TenantCounters counters = limiter->counters();
    TenantCounters& merged = by_name[counters.key_name];
    merged.key_name = counters.key_name;
    merged.requests_admitted += counters.requests_admitted;
    merged.requests_finished += counters.requests_finished;
    merged.prompt_tokens += counters.prompt_tokens;
    merged.completion_tokens += counters.completion_tokens;
    merged.in_flight += counters.in_flight;
    for (const auto& [reason, count] : counters.rejections) merged.rejections[reason] += count;
  }
  GatewayMetrics metrics;
  for (auto& [name, counters] : by_name) metrics.tenants.push_back(std::move(counters));
  metrics.authentication_failures = authentication_failures_.load();
  return metrics;
}

}  // namespace tachyon::gateway
