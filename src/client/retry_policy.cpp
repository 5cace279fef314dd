#include "client/retry_policy.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace tachyon::client {
namespace {

constexpr double kInitialBackoff = 0.5;
constexpr double kMaxBackoff = 8.0;
constexpr double kMaxServerWait = 60.0;

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !(value >= 0)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::optional<double> parse_retry_after(std::string_view value) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (std::optional<double> seconds = parse_number(value)) return seconds;
  // An HTTP date: "Wed, 21 Oct 2015 07:28:00 GMT".
  std::tm parts{};
  const std::string text(value);
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &parts);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const std::time_t when = timegm(&parts);
  const double seconds = std::difftime(when, std::time(nullptr));
  return std::max(0.0, seconds);
}

RetryPolicy::RetryPolicy(int max_retries, uint64_t seed)
    : max_retries_(std::max(0, max_retries)), random_(seed) {}

double RetryPolicy::backoff(int attempt) {
  const double base = std::min(kMaxBackoff, kInitialBackoff * std::pow(2.0, attempt));
  std::uniform_real_distribution<double> jitter(0.75, 1.0);
  return base * jitter(random_);
}

RetryDecision RetryPolicy::decide(int attempt, const Failure& failure) {
  RetryDecision decision;
  decision.why = failure.status ? fmt::format("HTTP {}", *failure.status) : failure.error;
  if (failure.status && !failure.error.empty()) decision.why += " " + failure.error;
  bool retryable;
  if (failure.should_retry == "true") {
    retryable = true;
  } else if (failure.should_retry == "false") {
    retryable = false;
  } else if (!failure.status) {
    retryable = true;  // connection refused, reset, timed out
  } else {
    const int status = *failure.status;
    retryable = status == 408 || status == 409 || status == 429 || status >= 500;
  }
  // Waiting does not refill a quota.
  if (failure.error == "insufficient_quota") retryable = false;
  if (!retryable || attempt >= max_retries_) return decision;
  decision.retry = true;
  decision.wait_seconds = backoff(attempt);
  std::optional<double> server_wait;
  if (std::optional<double> ms = parse_number(failure.retry_after_ms)) {
    server_wait = *ms / 1000.0;
  } else if (std::optional<double> seconds = parse_retry_after(failure.retry_after)) {
    server_wait = *seconds;
  }
  if (server_wait && *server_wait <= kMaxServerWait) decision.wait_seconds = *server_wait;
  return decision;
}

}  // namespace tachyon::client
