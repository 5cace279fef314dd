// Rejection: why the Gateway refused a request, in the shape of an OpenAI error response.
#pragma once

#include <optional>
#include <string>

namespace tachyon::gateway {

struct Rejection {
  int http_status = 429;
  std::string type;     // error.type: "requests", "tokens", "insufficient_quota", ...
  std::string code;     // error.code; empty: null
  std::string message;  // error.message, in OpenAI's wording
  std::string param;    // error.param; empty: null
  // Retry-After (send whole seconds rounded up, and retry-after-ms); already rounded up to ms.
  std::optional<double> retry_after_seconds;
  bool should_retry = false;  // x-should-retry: false stops the openai SDK's automatic retries
  std::string reason;         // metrics label, one of the kReason* below
};

// Rejection reasons (metrics labels), in the order admit() checks them.
inline constexpr const char* kReasonModelNotAllowed = "model_not_allowed";
inline constexpr const char* kReasonMaxTokens = "max_tokens";
inline constexpr const char* kReasonRequestTooLarge = "request_too_large";
inline constexpr const char* kReasonDailyQuota = "daily_quota";
inline constexpr const char* kReasonMonthlyQuota = "monthly_quota";
inline constexpr const char* kReasonConcurrency = "concurrency";
inline constexpr const char* kReasonRequests = "requests";
inline constexpr const char* kReasonTokens = "tokens";
inline constexpr const char* kReasonLedgerError = "ledger_error";
inline constexpr const char* kReasonLimiterUnavailable = "limiter_unavailable";

}  // namespace tachyon::gateway
