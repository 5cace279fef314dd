// RedisLimits: the per-key limit state (RPM and TPM buckets, requests in flight, day and month
// token counters) kept in Redis instead of in the process, so that every replica of a service
// grants one key's limits together (`serve --redis URL`). Each check is one atomic Lua script,
// one round trip: the same checks, in the same order, as TenantLimiter's own.
//
// Redis unreachable: calls fail (Status kUnavailable), the caller refuses the request with a
// 503 (fail closed) unless fail_open, where it falls back to the process's own limits. A broken
// connection is re-opened at the next call (at most every 250 ms); the first failure and the
// recovery are logged. Thread-safe (one connection under a mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct redisContext;

namespace tachyon::gateway {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int database = 0;
  std::string password;
};
// redis://[:password@]host[:port][/db]
Result<RedisAddress> parse_redis_url(std::string_view url);

// What one key may do, as the admission checks it (0 = unlimited).
struct SharedLimitsCheck {
  int64_t key_id = 0;
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  int64_t max_concurrent = 0;
  int64_t daily_tokens = 0;
  int64_t monthly_tokens = 0;
  int64_t charge = 0;        // tokens taken from the TPM bucket
  int64_t day = 0;           // UTC day (unix / 86400) and month (year * 12 + month - 1)
  int64_t month = 0;
  int64_t in_flight_ttl_seconds = 3600;  // a crashed replica's slots free themselves after this
};

struct SharedDecision {
  enum class Kind { kAdmitted, kDailyQuota, kMonthlyQuota, kConcurrency, kRequests, kTokens };
  Kind kind = Kind::kAdmitted;
  int64_t used = 0;           // tokens spent (quotas), requests in flight, or bucket use
  double wait_seconds = 0;    // until the bucket holds enough (requests, tokens)
};

class RedisLimits {
 public:
  static Result<std::unique_ptr<RedisLimits>> connect(const std::string& url, bool fail_open,
                                                      std::chrono::milliseconds timeout =
                                                          std::chrono::milliseconds(500));
  ~RedisLimits();
  RedisLimits(const RedisLimits&) = delete;
  RedisLimits& operator=(const RedisLimits&) = delete;

  bool fail_open() const { return fail_open_; }
  const std::string& url() const { return url_; }

  // The quota, concurrency, RPM and TPM checks and, when all pass, the takes. kNotFound: the
  // day or month counter is not in Redis yet; seed it (seed_quota) and ask again.
  Result<SharedDecision> admit(const SharedLimitsCheck& check);
  // Sets the day and month counters when they are missing (from the usage ledger).
  Status seed_quota(int64_t key_id, int64_t day, int64_t month, int64_t day_tokens,
                    int64_t month_tokens);
  // Ends an admitted request: frees its slot, settles charged - used on the TPM bucket and
  // adds `used` to the day and month counters (when `counted`: not a replay).
  Status finish(int64_t key_id, int64_t tokens_per_minute, int64_t charged, int64_t used,
                bool counted, int64_t day, int64_t month);
  // The buckets' levels now (tokens available; the capacity when unused).
  struct Levels {
    double requests = 0;
    double tokens = 0;
  };
  Result<Levels> levels(int64_t key_id, int64_t requests_per_minute, int64_t tokens_per_minute);

 private:
  RedisLimits(RedisAddress address, std::string url, bool fail_open,
              std::chrono::milliseconds timeout);
  // Under mutex_: a live connection with the scripts loaded, or why not.
  Status ensure_connected();
  void drop_connection(const std::string& why);
  // EVALSHA of script `index` (re-loading it once on NOSCRIPT); the reply array's strings.
  Result<std::vector<std::string>> run_script(int index, const std::vector<std::string>& keys,
                                              const std::vector<std::string>& args);

  const RedisAddress address_;
  const std::string url_;
  const bool fail_open_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  redisContext* context_ = nullptr;
  std::string script_sha_[4];
  std::chrono::steady_clock::time_point next_attempt_{};
  bool reported_down_ = false;
};

}  // namespace tachyon::gateway
