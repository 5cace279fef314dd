// Gateway: API key → Tenant, then admission under the key's limits, for the HTTP threads
// before the engine sees a request. Thread-safe.
//
//   Result<Tenant> tenant = gateway.authenticate(request["authorization"]);
//   // not ok: 401 invalid_api_key with tenant.status().message() (kNotFound, kInvalidArgument),
//   //         500 for anything else (the key store could not be read)
//   AdmitResult result = gateway.admit(*tenant, model, prompt_tokens, request.max_tokens);
//   if (auto* rejection = std::get_if<Rejection>(&result)) { ...error response... }
//   Admission& admission = std::get<Admission>(result);
//   ... headers: gateway.rate_limit_headers(*tenant) ...
//   admission.finish({.request_id = id, .prompt_tokens = ..., .status = "ok", ...});
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "gateway/admission.h"
#include "gateway/gateway_clock.h"
#include "gateway/gateway_metrics.h"
#include "gateway/key_secret.h"
#include "gateway/key_store.h"
#include "gateway/redis_limits.h"
#include "gateway/rejection.h"
#include "gateway/tenant.h"
#include "gateway/usage_ledger.h"

namespace tachyon::gateway {

class TenantLimiter;

using AdmitResult = std::variant<Admission, Rejection>;

struct GatewayOptions {
  GatewayClock clock;
  // How long an authenticated key is trusted before the store is asked again, i.e. how soon a
  // `keys revoke` / `keys update` from another process takes effect.
  std::chrono::milliseconds key_cache_ttl{1000};
  // Limits shared by every replica (`serve --redis`); null: this process's own.
  std::shared_ptr<RedisLimits> shared_limits;
};

class Gateway {
 public:
  // Any of the three may be absent: keys from `key_store` (may be null), static keys (tenants
  // "static-1", "static-2", ... with no limits), usage recorded in `ledger` (may be null).
  Gateway(std::shared_ptr<KeyStore> key_store, const std::vector<std::string>& static_keys,
          std::shared_ptr<UsageLedger> ledger, GatewayOptions options = {});
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Keys and ledger in one SQLite file (created when missing), plus static keys.
  static Result<std::unique_ptr<Gateway>> open(const std::string& db_path,
                                               const std::vector<std::string>& static_keys,
                                               GatewayOptions options = {});

  // The Authorization header's value: "Bearer <key>" (scheme case-insensitive). Errors:
  // kInvalidArgument (no key given) and kNotFound (unknown or revoked key) carry OpenAI's 401
  // message; other codes mean the key store failed (500).
  Result<Tenant> authenticate(std::string_view authorization);

  // Checks, in order: model allowed (403 permission_error, model_not_allowed); max_tokens
  // within the key's cap (400 invalid_request_error, param max_tokens); prompt + max_tokens
  // within the TPM bucket's capacity (429 tokens, should_retry false); daily, then monthly
  // token quota (429 insufficient_quota, should_retry false); concurrency (429 requests, retry
  // in 1 s); RPM bucket (429 requests) and TPM bucket (429 tokens), with Retry-After from the
  // refill rate. `max_tokens` is the request's own (nullopt when it gave none: the key's cap,
  // if any, is then charged and reported by Admission::max_tokens()). A refused request with a
  // `request_id` is written to the usage ledger: status "rejected", the reason as its
  // finish_reason, no tokens (so it counts toward no quota).
  AdmitResult admit(const Tenant& tenant, std::string_view model, int64_t prompt_tokens,
                    std::optional<int64_t> max_tokens, std::string_view request_id = {});

  // x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the key's RPM / TPM limits, in
  // that order; a limit the key does not have gets no headers.
  std::vector<std::pair<std::string, std::string>> rate_limit_headers(const Tenant& tenant);

  GatewayMetrics metrics();

  // Whether any key can authenticate at all (a store or static keys).
  bool has_keys() const { return key_store_ != nullptr || !static_keys_.empty(); }
  UsageLedger* ledger() const { return ledger_.get(); }

 private:
  struct CachedKey {
    Tenant tenant;
    GatewayClock::TimePoint fetched;
  };
  struct StaticKey {
    SecretHash hash;
    Tenant tenant;
  };

  std::shared_ptr<TenantLimiter> limiter_for(const Tenant& tenant);
  Status invalid_key(std::string_view secret);

  std::shared_ptr<KeyStore> key_store_;
  std::shared_ptr<UsageLedger> ledger_;
  std::shared_ptr<const GatewayClock> clock_;
  std::chrono::milliseconds key_cache_ttl_;
  std::shared_ptr<RedisLimits> shared_limits_;
  std::vector<StaticKey> static_keys_;

  std::mutex cache_mutex_;
  std::unordered_map<std::string, CachedKey> key_cache_;  // by the raw bytes of the hash

  std::mutex limiters_mutex_;
  std::unordered_map<int64_t, std::shared_ptr<TenantLimiter>> limiters_;  // by key id

  std::atomic<uint64_t> authentication_failures_{0};
};

}  // namespace tachyon::gateway
