#include "gateway/tenant_limiter.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tachyon::gateway {
namespace {

constexpr int64_t kSecondsPerDay = 86'400;
// A request over the concurrency cap waits for another to finish; that is usually quick.
constexpr double kConcurrencyRetrySeconds = 1.0;

int64_t day_of(int64_t unix_seconds) {
  return unix_seconds >= 0 ? unix_seconds / kSecondsPerDay
                           : -((-unix_seconds + kSecondsPerDay - 1) / kSecondsPerDay);
}

std::chrono::year_month_day civil_day(int64_t day) {
  return std::chrono::year_month_day(std::chrono::sys_days(std::chrono::days(day)));
}

int64_t month_of(int64_t day) {
  const auto date = civil_day(day);
  return static_cast<int>(date.year()) * 12 +
         static_cast<int>(static_cast<unsigned>(date.month())) - 1;
}

// Unix second at which the UTC month `month` (year * 12 + month - 1) starts.
int64_t month_start(int64_t month) {
  const std::chrono::year_month_day first(std::chrono::year(static_cast<int>(month / 12)),
                                          std::chrono::month(static_cast<unsigned>(month % 12 + 1)),
                                          std::chrono::day(1));
  return std::chrono::sys_days(first).time_since_epoch().count() * kSecondsPerDay;
}

// Rounded up to whole milliseconds, so waiting exactly this long is always enough.
double round_up_ms(double seconds) {
  return std::ceil(seconds * 1000.0 - 1e-6) / 1000.0;
}

// How much of a bucket is in use, for "Used N" in messages.
int64_t used_of(TokenBucket& bucket, TokenBucket::TimePoint now) {
  const double used = std::ceil(bucket.capacity() - bucket.level(now) - 1e-6);
  return static_cast<int64_t>(std::clamp(used, 0.0, bucket.capacity()));
}

Rejection make_rejection(int http_status, const char* type, const char* code, const char* reason,
                         std::string message) {
  Rejection rejection;
  rejection.http_status = http_status;
  rejection.type = type;
  rejection.code = code;
  rejection.reason = reason;
  rejection.message = std::move(message);
  return rejection;
}

}  // namespace

TenantLimiter::TenantLimiter(int64_t key_id, std::string key_name, TimePoint now,
                             std::shared_ptr<RedisLimits> shared)
    : key_id_(key_id),
      key_name_(std::move(key_name)),
      shared_(std::move(shared)),
      requests_(0, now),
      tokens_(0, now) {
  counters_.key_name = key_name_;
}

void TenantLimiter::apply_policy(const KeyPolicy& policy, TimePoint now) {
  // `keys update` reaches us through the tenant's policy; only a changed limit moves a bucket.
  const auto rpm = static_cast<double>(policy.requests_per_minute);
  const auto tpm = static_cast<double>(policy.tokens_per_minute);
  if (requests_.capacity() != rpm) requests_.set_capacity(rpm, now);
  if (tokens_.capacity() != tpm) tokens_.set_capacity(tpm, now);
}

Status TenantLimiter::refresh_quota_window(int64_t unix_now, UsageLedger* ledger) {
  const int64_t day = day_of(unix_now);
  if (day == window_day_) return Status::ok_status();
  const int64_t month = month_of(day);
  if (ledger) {
    // The ledger is the truth: it holds what earlier runs (and other processes) used.
    TACHYON_ASSIGN_OR_RETURN(int64_t day_tokens,
                             ledger->tokens_since(key_id_, day * kSecondsPerDay));
    TACHYON_ASSIGN_OR_RETURN(int64_t month_tokens,
                             ledger->tokens_since(key_id_, month_start(month)));
    day_tokens_ = day_tokens;
    month_tokens_ = month_tokens;
  } else {
    day_tokens_ = 0;
    if (month != window_month_) month_tokens_ = 0;
  }
  window_day_ = day;
  window_month_ = month;
  return Status::ok_status();
}

Rejection TenantLimiter::reject(Rejection rejection) {
  ++counters_.rejections[rejection.reason];
  return rejection;
}

std::variant<Charge, Rejection> TenantLimiter::admit(const KeyPolicy& policy,
                                                     std::string_view model, int64_t prompt_tokens,
                                                     std::optional<int64_t> max_tokens,
                                                     TimePoint now, int64_t unix_now,
                                                     UsageLedger* ledger) {
  std::lock_guard lock(mutex_);
  apply_policy(policy, now);

  if (!policy.allows_model(model)) {
    Rejection r = make_rejection(
        403, "permission_error", "model_not_allowed", kReasonModelNotAllowed,
        fmt::format("This API key does not have access to model `{}`. It may use: {}.", model,
                    fmt::join(policy.models, ", ")));
    r.param = "model";
    return reject(std::move(r));
  }

  Charge charge;
  charge.max_tokens = max_tokens;
  if (policy.max_tokens > 0) {
    if (max_tokens && *max_tokens > policy.max_tokens) {
      Rejection r = make_rejection(
          400, "invalid_request_error", "invalid_value", kReasonMaxTokens,
          fmt::format("max_tokens is too large: {}. This API key allows at most {} completion "
                      "tokens, whereas you provided {}.",
                      *max_tokens, policy.max_tokens, *max_tokens));
      r.param = "max_tokens";
      return reject(std::move(r));
    }
    if (!max_tokens) charge.max_tokens = policy.max_tokens;
  }
  // Negative counts would refill the bucket; the server validates them, this only guards.
  charge.tokens =
      std::max<int64_t>(0, prompt_tokens) + std::max<int64_t>(0, charge.max_tokens.value_or(0));

  if (policy.tokens_per_minute > 0 && charge.tokens > policy.tokens_per_minute) {
    // should_retry stays false: waiting cannot make the bucket bigger.
    return reject(make_rejection(
        429, "tokens", "rate_limit_exceeded", kReasonRequestTooLarge,
        fmt::format("Request too large for {} in organization {} on tokens per min (TPM): "
                    "Limit {}, Requested {}. The input or output tokens must be reduced in "
                    "order to run successfully.",
                    model, key_name_, policy.tokens_per_minute, charge.tokens)));
  }

  if (Status status = refresh_quota_window(unix_now, ledger); !status.ok()) {
    Rejection r =
        make_rejection(503, "unavailable_error", "usage_ledger_unavailable", kReasonLedgerError,
                       "The usage ledger could not be read: " + status.message());
    r.retry_after_seconds = 1.0;
    r.should_retry = true;
    return reject(std::move(r));
  }
  const bool has_limits = policy.requests_per_minute > 0 || policy.tokens_per_minute > 0 ||
                          policy.max_concurrent_requests > 0 || policy.daily_tokens > 0 ||
                          policy.monthly_tokens > 0;
  if (shared_ && has_limits) {
    if (auto decided = admit_shared(policy, model, charge, unix_now, ledger)) return *decided;
  }
  if (policy.daily_tokens > 0 && day_tokens_ >= policy.daily_tokens) {
    return quota_rejection("daily", day_tokens_, policy.daily_tokens,
                           (window_day_ + 1) * kSecondsPerDay, "at 00:00 UTC", kReasonDailyQuota,
                           unix_now);
  }
  if (policy.monthly_tokens > 0 && month_tokens_ >= policy.monthly_tokens) {
    return quota_rejection("monthly", month_tokens_, policy.monthly_tokens,
                           month_start(window_month_ + 1), "on the 1st at 00:00 UTC",
                           kReasonMonthlyQuota, unix_now);
  }
  if (policy.max_concurrent_requests > 0 && in_flight_ >= policy.max_concurrent_requests) {
    return concurrency_rejection(model, policy.max_concurrent_requests, in_flight_);
  }
  if (policy.requests_per_minute > 0 && requests_.seconds_until(1, now) > 0) {
    return requests_rejection(model, policy.requests_per_minute, used_of(requests_, now),
                              round_up_ms(requests_.seconds_until(1, now)));
  }
  const auto charged = static_cast<double>(charge.tokens);
  if (policy.tokens_per_minute > 0 && tokens_.seconds_until(charged, now) > 0) {
    return tokens_rejection(model, policy.tokens_per_minute, used_of(tokens_, now), charge.tokens,
                            round_up_ms(tokens_.seconds_until(charged, now)));
  }

  // Every check passed under the lock, so these takes cannot fail.
  if (policy.requests_per_minute > 0) requests_.take(1, now);
  if (policy.tokens_per_minute > 0) tokens_.take(charged, now);
  ++in_flight_;
  ++counters_.requests_admitted;
  return charge;
}

std::optional<std::variant<Charge, Rejection>> TenantLimiter::admit_shared(
    const KeyPolicy& policy, std::string_view model, Charge charge, int64_t unix_now,
    UsageLedger* ledger) {
  const int64_t day = day_of(unix_now);
  SharedLimitsCheck check;
  check.key_id = key_id_;
  check.requests_per_minute = policy.requests_per_minute;
  check.tokens_per_minute = policy.tokens_per_minute;
  check.max_concurrent = policy.max_concurrent_requests;
  check.daily_tokens = policy.daily_tokens;
  check.monthly_tokens = policy.monthly_tokens;
  check.charge = charge.tokens;
  check.day = day;
  check.month = month_of(day);
  Result<SharedDecision> decision = shared_->admit(check);
  if (!decision.ok() && decision.status().code() == StatusCode::kNotFound) {
    // The day's (or month's) counters are not in Redis yet (a new day, or Redis restarted):
    // the ledger, which every replica writes, is the truth; this process's own counters are not.
    Result<int64_t> day_tokens = ledger ? ledger->tokens_since(key_id_, day * kSecondsPerDay)
                                        : Result<int64_t>(int64_t{0});
    Result<int64_t> month_tokens = ledger ? ledger->tokens_since(key_id_, month_start(check.month))
                                          : Result<int64_t>(int64_t{0});
    Status seeded = !day_tokens.ok() ? day_tokens.status() : month_tokens.status();
    if (seeded.ok()) {
      seeded = shared_->seed_quota(key_id_, day, check.month, *day_tokens, *month_tokens);
    }
    decision = seeded.ok() ? shared_->admit(check) : Result<SharedDecision>(seeded);
  }
  if (!decision.ok()) {
    if (shared_->fail_open()) return std::nullopt;
    Rejection r = make_rejection(
        503, "unavailable_error", "rate_limiter_unavailable", kReasonLimiterUnavailable,
        "The shared rate limiter is unavailable, so no request with an API key is admitted; "
        "try again shortly");
    r.retry_after_seconds = 1.0;
    r.should_retry = true;
    return reject(std::move(r));
  }
  switch (decision->kind) {
    case SharedDecision::Kind::kDailyQuota:
      return quota_rejection("daily", decision->used, policy.daily_tokens,
                             (day + 1) * kSecondsPerDay, "at 00:00 UTC", kReasonDailyQuota,
                             unix_now);
    case SharedDecision::Kind::kMonthlyQuota:
      return quota_rejection("monthly", decision->used, policy.monthly_tokens,
                             month_start(check.month + 1), "on the 1st at 00:00 UTC",
                             kReasonMonthlyQuota, unix_now);
    case SharedDecision::Kind::kConcurrency:
      return concurrency_rejection(model, policy.max_concurrent_requests, decision->used);
    case SharedDecision::Kind::kRequests:
      return requests_rejection(model, policy.requests_per_minute, decision->used,
                                decision->wait_seconds);
    case SharedDecision::Kind::kTokens:
      return tokens_rejection(model, policy.tokens_per_minute, decision->used, charge.tokens,
                              decision->wait_seconds);
    case SharedDecision::Kind::kAdmitted:
      break;
  }
  ++in_flight_;
  ++counters_.requests_admitted;
  charge.shared = true;
  return charge;
}

Rejection TenantLimiter::quota_rejection(const char* period, int64_t spent, int64_t quota,
                                         int64_t resets_at, const char* when, const char* reason,
                                         int64_t unix_now) {
  const auto wait = static_cast<double>(resets_at - unix_now);
  // should_retry stays false: the SDK retries within seconds, the quota resets in hours.
  Rejection r = make_rejection(
      429, "insufficient_quota", "insufficient_quota", reason,
      fmt::format("You exceeded your current quota, please check your plan and billing "
                  "details. API key {} has used {} of its {} {} tokens; the quota resets {} "
                  "(in {}).",
                  key_name_, spent, quota, period, when, format_go_duration(wait)));
  r.retry_after_seconds = wait;
  return reject(std::move(r));
}

Rejection TenantLimiter::concurrency_rejection(std::string_view model, int64_t limit,
                                               int64_t in_flight) {
  Rejection r = make_rejection(
      429, "requests", "rate_limit_exceeded", kReasonConcurrency,
      fmt::format("Rate limit reached for {} in organization {} on concurrent requests: "
                  "Limit {}, Used {}, Requested 1. Please try again in {}.",
                  model, key_name_, limit, in_flight,
                  format_go_duration(kConcurrencyRetrySeconds)));
  r.retry_after_seconds = kConcurrencyRetrySeconds;
  r.should_retry = true;
  return reject(std::move(r));
}

Rejection TenantLimiter::requests_rejection(std::string_view model, int64_t limit, int64_t used,
                                            double wait) {
  Rejection r = make_rejection(
      429, "requests", "rate_limit_exceeded", kReasonRequests,
      fmt::format("Rate limit reached for {} in organization {} on requests per min (RPM): "
                  "Limit {}, Used {}, Requested 1. Please try again in {}.",
                  model, key_name_, limit, used, format_go_duration(wait)));
  r.retry_after_seconds = wait;
  r.should_retry = true;
  return reject(std::move(r));
}

Rejection TenantLimiter::tokens_rejection(std::string_view model, int64_t limit, int64_t used,
                                          int64_t charge, double wait) {
  Rejection r = make_rejection(
      429, "tokens", "rate_limit_exceeded", kReasonTokens,
      fmt::format("Rate limit reached for {} in organization {} on tokens per min (TPM): "
                  "Limit {}, Used {}, Requested {}. Please try again in {}.",
                  model, key_name_, limit, used, charge, format_go_duration(wait)));
  r.retry_after_seconds = wait;
  r.should_retry = true;
  return reject(std::move(r));
}

Status TenantLimiter::finish(int64_t charged_tokens, const UsageRecord& record, TimePoint now,
                             UsageLedger* ledger, bool shared) {
  // The ledger write happens under the key's lock so a concurrent window refresh cannot count
  // this record twice (once from the ledger, once in memory).
  std::lock_guard lock(mutex_);
  (void)refresh_quota_window(record.unix_time, ledger);  // a failure retries at the next admit
  Status status;
  bool counted = true;
  if (ledger) {
    Result<bool> inserted = ledger->record(record);
    if (inserted.ok()) {
      counted = *inserted;  // false: a replay of a request already counted
    } else {
      status = inserted.status();  // still counted in memory so this process enforces quotas
    }
  }
  in_flight_ = std::max<int64_t>(0, in_flight_ - 1);
  ++counters_.requests_finished;
  const int64_t used =
      std::max<int64_t>(0, record.prompt_tokens) + std::max<int64_t>(0, record.completion_tokens);
  if (shared) {
    const int64_t day = day_of(record.unix_time);
    Status settled = shared_->finish(key_id_, static_cast<int64_t>(tokens_.capacity()),
                                     charged_tokens, used, counted, day, month_of(day));
    if (!settled.ok() && status.ok()) status = settled;
  } else if (tokens_.capacity() > 0) {
    if (used < charged_tokens) {
      tokens_.give_back(static_cast<double>(charged_tokens - used), now);
    } else if (used > charged_tokens) {
      tokens_.take(static_cast<double>(used - charged_tokens), now);
    }
  }
  if (counted) {
    counters_.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, record.prompt_tokens));
    counters_.completion_tokens +=
        static_cast<uint64_t>(std::max<int64_t>(0, record.completion_tokens));
    if (day_of(record.unix_time) == window_day_) {
      day_tokens_ += used;
      month_tokens_ += used;
    }
  }
  return status;
}

void TenantLimiter::abandon(bool shared) {
  std::lock_guard lock(mutex_);
  in_flight_ = std::max<int64_t>(0, in_flight_ - 1);
  if (shared) {
    // Only the slot: nothing was used, and the charge stays taken as in the local case.
    const int64_t day = day_of(0);
    (void)shared_->finish(key_id_, 0, 0, 0, /*counted=*/false, day, month_of(day));
  }
}

std::vector<std::pair<std::string, std::string>> TenantLimiter::headers(const KeyPolicy& policy,
                                                                        TimePoint now) {
  std::lock_guard lock(mutex_);
  apply_policy(policy, now);
  std::vector<std::pair<std::string, std::string>> headers;
  const bool requests = policy.requests_per_minute > 0;
  const bool tokens = policy.tokens_per_minute > 0;
  // The shared buckets when limits live in Redis (this process's own if it cannot answer).
  double requests_level = requests ? requests_.level(now) : 0;
  double tokens_level = tokens ? tokens_.level(now) : 0;
  if (shared_ && (requests || tokens)) {
    Result<RedisLimits::Levels> levels =
        shared_->levels(key_id_, policy.requests_per_minute, policy.tokens_per_minute);
    if (levels.ok()) {
      requests_level = levels->requests;
      tokens_level = levels->tokens;
    }
  }
  auto remaining = [](double level) {
    return std::to_string(static_cast<int64_t>(std::max(0.0, std::floor(level + 1e-6))));
  };
  // Seconds until a bucket at `level` is full again (it refills capacity / 60 per second).
  auto until_full = [](double level, int64_t capacity) {
    const double missing = static_cast<double>(capacity) - level;
    return missing <= 1e-9 ? 0.0 : missing * 60.0 / static_cast<double>(capacity);
  };
  if (requests)
    headers.emplace_back("x-ratelimit-limit-requests", std::to_string(policy.requests_per_minute));
  if (tokens)
    headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(policy.tokens_per_minute));
  if (requests) headers.emplace_back("x-ratelimit-remaining-requests", remaining(requests_level));
  if (tokens) headers.emplace_back("x-ratelimit-remaining-tokens", remaining(tokens_level));
  if (requests) {
    headers.emplace_back("x-ratelimit-reset-requests",
                         format_go_duration(until_full(requests_level, policy.requests_per_minute)));
  }
  if (tokens) {
    headers.emplace_back("x-ratelimit-reset-tokens",
                         format_go_duration(until_full(tokens_level, policy.tokens_per_minute)));
  }
  return headers;
}

TenantCounters TenantLimiter::counters() {
  std::lock_guard lock(mutex_);
  TenantCounters counters = counters_;
  counters.in_flight = in_flight_;
  return counters;
}

}  // namespace tachyon::gateway
