// RetryPolicy: whether and when to send a request again, as the official OpenAI SDKs decide:
// connection failures, 408, 409, 429 and 5xx are retried with exponential backoff and jitter
// (0.5 s doubling to 8 s, each wait 75-100% of that); a server's Retry-After / retry-after-ms
// (up to 60 s) replaces the backoff; x-should-retry: true/false overrides the status; other
// 4xx and insufficient_quota are final.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace tachyon::client {

struct RetryDecision {
  bool retry = false;
  double wait_seconds = 0;
  std::string why;  // for messages: "429 rate_limit_exceeded", "connection refused", ...
};

class RetryPolicy {
 public:
  explicit RetryPolicy(int max_retries = 5, uint64_t seed = std::random_device{}());

  int max_retries() const { return max_retries_; }

  // After attempt number `attempt` (0 = the first) failed. `status`: nothing for a
  // connection failure (`error` says what). The headers by name, lower case (empty: absent).
  struct Failure {
    std::optional<int> status;
    std::string error;          // transport error, or the body's error.code
    std::string retry_after;    // Retry-After
    std::string retry_after_ms; // retry-after-ms
    std::string should_retry;   // x-should-retry
  };
  RetryDecision decide(int attempt, const Failure& failure);

 private:
  double backoff(int attempt);

  int max_retries_;
  std::mt19937_64 random_;
};

// Seconds a Retry-After value asks for ("7", "1.5", or an HTTP date relative to now); nothing
// when it cannot be read.
std::optional<double> parse_retry_after(std::string_view value);

}  // namespace tachyon::client
