// TenantLimiter: the live limit state of one key (RPM and TPM buckets, requests in flight, day
// and month token counters, metrics). One mutex per key makes every check-and-take exact under
// concurrency without serialising different keys.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "gateway/gateway_metrics.h"
#include "gateway/key_policy.h"
#include "gateway/redis_limits.h"
#include "gateway/rejection.h"
#include "gateway/token_bucket.h"
#include "gateway/usage_ledger.h"

namespace tachyon::gateway {

// What an admitted request was charged.
struct Charge {
  int64_t tokens = 0;                 // taken from the TPM bucket: prompt + max_tokens
  std::optional<int64_t> max_tokens;  // the completion cap to apply (the key's when none given)
  bool shared = false;                // taken in Redis (RedisLimits), not in this process
};

class TenantLimiter {
 public:
  using TimePoint = TokenBucket::TimePoint;

  // `shared` (may be null): keep the limit state in Redis instead of here.
  TenantLimiter(int64_t key_id, std::string key_name, TimePoint now,
                std::shared_ptr<RedisLimits> shared = nullptr);

  int64_t key_id() const { return key_id_; }
  const std::string& key_name() const { return key_name_; }

  // The checks of Gateway::admit, in its order; on success the slot and tokens are taken.
  // `ledger` (may be null) rebuilds the day and month counters the first time they matter.
  std::variant<Charge, Rejection> admit(const KeyPolicy& policy, std::string_view model,
                                        int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                        TimePoint now, int64_t unix_now, UsageLedger* ledger);

  // Ends an admitted request: writes `record` to `ledger` (may be null), frees its slot,
  // refunds charged - used to the TPM bucket (or takes the excess) and counts the tokens used.
  // `shared`: the Charge's (the request was admitted in Redis).
  Status finish(int64_t charged_tokens, const UsageRecord& record, TimePoint now,
                UsageLedger* ledger, bool shared = false);
  // Frees the slot of a request that never called finish(); its charge stays taken.
  void abandon(bool shared = false);

  // x-ratelimit-* for the limits this key has (none for unlimited ones).
  std::vector<std::pair<std::string, std::string>> headers(const KeyPolicy& policy, TimePoint now);

  TenantCounters counters();

 private:
  void apply_policy(const KeyPolicy& policy, TimePoint now);
  // The quota, concurrency, RPM and TPM checks in Redis; nullopt when Redis cannot answer and
  // fail-open sends the request to the local checks instead.
  std::optional<std::variant<Charge, Rejection>> admit_shared(const KeyPolicy& policy,
                                                              std::string_view model,
                                                              Charge charge, int64_t unix_now,
                                                              UsageLedger* ledger);
  // OpenAI's wording for each refusal.
  Rejection quota_rejection(const char* period, int64_t spent, int64_t quota, int64_t resets_at,
                            const char* when, const char* reason, int64_t unix_now);
  Rejection concurrency_rejection(std::string_view model, int64_t limit, int64_t in_flight);
  Rejection requests_rejection(std::string_view model, int64_t limit, int64_t used, double wait);
  Rejection tokens_rejection(std::string_view model, int64_t limit, int64_t used, int64_t charge,
                             double wait);
  // Loads the day/month counters from the ledger when the UTC day changed since last time.
  Status refresh_quota_window(int64_t unix_now, UsageLedger* ledger);
  Rejection reject(Rejection rejection);

  const int64_t key_id_;
  const std::string key_name_;
  const std::shared_ptr<RedisLimits> shared_;

  std::mutex mutex_;
  TokenBucket requests_;
  TokenBucket tokens_;
  int64_t in_flight_ = 0;
  int64_t window_day_ = -1;    // UTC day (unix / 86400) the counters below belong to
  int64_t window_month_ = -1;  // year * 12 + month - 1
  int64_t day_tokens_ = 0;
  int64_t month_tokens_ = 0;
  TenantCounters counters_;
};

}  // namespace tachyon::gateway
