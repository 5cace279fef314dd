#include "client/retry_policy.h"

#include <algorithm>
#include <ctime>
#include <string>

#include <gtest/gtest.h>

namespace tachyon::client {
namespace {

using Failure = RetryPolicy::Failure;

Failure with_status(int status) {
  Failure failure;
  failure.status = status;
  return failure;
}

// The backoff before jitter after attempt `attempt`: 0.5 s doubling, at most 8 s.
double base_backoff(int attempt) {
  double base = 0.5;
  for (int i = 0; i < attempt; ++i) base *= 2;
  return std::min(8.0, base);
}

void expect_backoff(const RetryDecision& decision, int attempt) {
  ASSERT_TRUE(decision.retry);
  const double base = base_backoff(attempt);
  EXPECT_GE(decision.wait_seconds, 0.75 * base) << "attempt " << attempt;
  EXPECT_LE(decision.wait_seconds, base) << "attempt " << attempt;
}

// An HTTP date (RFC 7231 IMF-fixdate) `offset` seconds from now.
std::string http_date(long offset) {
  const std::time_t when = std::time(nullptr) + offset;
  std::tm parts{};
  gmtime_r(&when, &parts);
  char text[64];
  const size_t size = std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &parts);
  return std::string(text, size);
}

TEST(RetryPolicyTest, ConnectionFailureIsRetried) {
  RetryPolicy policy(5, 1);
  Failure failure;
  failure.error = "connection refused";
  const RetryDecision decision = policy.decide(0, failure);
  EXPECT_TRUE(decision.retry);
  EXPECT_GT(decision.wait_seconds, 0);
  EXPECT_EQ(decision.why, "connection refused");
}

TEST(RetryPolicyTest, RetryableStatuses) {
  RetryPolicy policy(5, 2);
  for (int status : {408, 409, 429, 500, 502, 503, 504}) {
    const RetryDecision decision = policy.decide(0, with_status(status));
    EXPECT_TRUE(decision.retry) << status;
    EXPECT_GT(decision.wait_seconds, 0) << status;
  }
}

TEST(RetryPolicyTest, OtherClientErrorsAreFinal) {
  RetryPolicy policy(5, 3);
  for (int status : {400, 401, 403, 404, 422}) {
    const RetryDecision decision = policy.decide(0, with_status(status));
    EXPECT_FALSE(decision.retry) << status;
    EXPECT_EQ(decision.wait_seconds, 0) << status;
  }
}

TEST(RetryPolicyTest, WhyNamesStatusAndCode) {
  RetryPolicy policy(5, 4);
  Failure failure = with_status(429);
  failure.error = "rate_limit_exceeded";
  EXPECT_EQ(policy.decide(0, failure).why, "HTTP 429 rate_limit_exceeded");
  EXPECT_EQ(policy.decide(0, with_status(404)).why, "HTTP 404");
}

TEST(RetryPolicyTest, ShouldRetryHeaderOverridesStatus) {
  RetryPolicy policy(5, 5);
  Failure bad_request = with_status(400);
  bad_request.should_retry = "true";
  EXPECT_TRUE(policy.decide(0, bad_request).retry);

  Failure unavailable = with_status(503);
  unavailable.should_retry = "false";
  EXPECT_FALSE(policy.decide(0, unavailable).retry);

  Failure connection;
  connection.error = "connection reset";
  connection.should_retry = "false";
  EXPECT_FALSE(policy.decide(0, connection).retry);
}

TEST(RetryPolicyTest, InsufficientQuotaIsFinal) {
  RetryPolicy policy(5, 6);
  Failure failure = with_status(429);
  failure.error = "insufficient_quota";
  EXPECT_FALSE(policy.decide(0, failure).retry);
  failure.should_retry = "true";
  EXPECT_FALSE(policy.decide(0, failure).retry);
  failure.retry_after = "1";
  EXPECT_FALSE(policy.decide(0, failure).retry);
}

TEST(RetryPolicyTest, StopsAfterMaxRetries) {
  RetryPolicy policy(3, 7);
  EXPECT_EQ(policy.max_retries(), 3);
  EXPECT_TRUE(policy.decide(0, with_status(500)).retry);
  EXPECT_TRUE(policy.decide(2, with_status(500)).retry);
  EXPECT_FALSE(policy.decide(3, with_status(500)).retry);
  EXPECT_FALSE(policy.decide(4, with_status(500)).retry);

  RetryPolicy never(0, 7);
  EXPECT_FALSE(never.decide(0, with_status(503)).retry);
  Failure connection;
  connection.error = "connection refused";
  EXPECT_FALSE(never.decide(0, connection).retry);
}

TEST(RetryPolicyTest, NegativeMaxRetriesMeansNone) {
  RetryPolicy policy(-2, 8);
  EXPECT_EQ(policy.max_retries(), 0);
  EXPECT_FALSE(policy.decide(0, with_status(503)).retry);
}

TEST(RetryPolicyTest, BackoffDoublesWithJitterAndIsCapped) {
  for (uint64_t seed : {1u, 42u, 12345u}) {
    SCOPED_TRACE(seed);
    RetryPolicy policy(20, seed);
    for (int attempt = 0; attempt < 10; ++attempt) {
      expect_backoff(policy.decide(attempt, with_status(503)), attempt);
    }
  }
  // The bases themselves: 0.5, 1, 2, 4, 8, 8.
  EXPECT_EQ(base_backoff(0), 0.5);
  EXPECT_EQ(base_backoff(4), 8.0);
  EXPECT_EQ(base_backoff(5), 8.0);
}

TEST(RetryPolicyTest, BackoffIsCappedAtEightSeconds) {
  RetryPolicy policy(1000, 99);
  for (int attempt : {4, 5, 10, 60, 500}) {
    const RetryDecision decision = policy.decide(attempt, with_status(500));
    ASSERT_TRUE(decision.retry) << attempt;
    EXPECT_GE(decision.wait_seconds, 6.0) << attempt;
    EXPECT_LE(decision.wait_seconds, 8.0) << attempt;
  }
}

TEST(RetryPolicyTest, JitterVaries) {
  RetryPolicy policy(20, 2024);
  double lowest = 1, highest = 0;
  for (int i = 0; i < 200; ++i) {
    const double wait = policy.decide(0, with_status(503)).wait_seconds;
    lowest = std::min(lowest, wait);
    highest = std::max(highest, wait);
  }
  EXPECT_GE(lowest, 0.375);
  EXPECT_LE(highest, 0.5);
  EXPECT_LT(lowest, highest);  // not a constant
}

TEST(RetryPolicyTest, SameSeedSameWaits) {
  RetryPolicy first(10, 77), second(10, 77);
  for (int attempt = 0; attempt < 6; ++attempt) {
    EXPECT_EQ(first.decide(attempt, with_status(502)).wait_seconds,
              second.decide(attempt, with_status(502)).wait_seconds);
  }
}

TEST(RetryPolicyTest, RetryAfterMilliseconds) {
  RetryPolicy policy(5, 9);
  Failure failure = with_status(429);
  failure.retry_after_ms = "1500";
  const RetryDecision decision = policy.decide(0, failure);
  ASSERT_TRUE(decision.retry);
  EXPECT_DOUBLE_EQ(decision.wait_seconds, 1.5);
}

TEST(RetryPolicyTest, RetryAfterSeconds) {
  RetryPolicy policy(5, 10);
  Failure failure = with_status(503);
  failure.retry_after = "3";
  const RetryDecision decision = policy.decide(0, failure);
  ASSERT_TRUE(decision.retry);
  EXPECT_DOUBLE_EQ(decision.wait_seconds, 3.0);
}

TEST(RetryPolicyTest, RetryAfterDate) {
  RetryPolicy policy(5, 10);
  Failure failure = with_status(503);
  failure.retry_after = http_date(20);
  const RetryDecision decision = policy.decide(0, failure);
  ASSERT_TRUE(decision.retry);
  EXPECT_GE(decision.wait_seconds, 18.0);  // the date has whole seconds; a second may tick
  EXPECT_LE(decision.wait_seconds, 20.0);
}

TEST(RetryPolicyTest, RetryAfterMillisecondsWins) {
  RetryPolicy policy(5, 11);
  Failure failure = with_status(429);
  failure.retry_after_ms = "250";
  failure.retry_after = "5";
  const RetryDecision decision = policy.decide(0, failure);
  ASSERT_TRUE(decision.retry);
  EXPECT_DOUBLE_EQ(decision.wait_seconds, 0.25);
}

TEST(RetryPolicyTest, ServerWaitUpToSixtySecondsIsKept) {
  RetryPolicy policy(5, 12);
  Failure failure = with_status(429);
  failure.retry_after = "60";
  EXPECT_DOUBLE_EQ(policy.decide(0, failure).wait_seconds, 60.0);
}

TEST(RetryPolicyTest, ServerWaitOverSixtySecondsFallsBackToBackoff) {
  RetryPolicy policy(5, 13);
  Failure seconds = with_status(429);
  seconds.retry_after = "120";
  expect_backoff(policy.decide(1, seconds), 1);

  Failure milliseconds = with_status(429);
  milliseconds.retry_after_ms = "61000";
  expect_backoff(policy.decide(2, milliseconds), 2);

  Failure far_date = with_status(503);
  far_date.retry_after = http_date(3600);
  expect_backoff(policy.decide(0, far_date), 0);
}

TEST(RetryPolicyTest, GarbageHeadersAreIgnored) {
  RetryPolicy policy(5, 14);
  Failure failure = with_status(503);
  failure.retry_after = "soon";
  failure.retry_after_ms = "a lot";
  expect_backoff(policy.decide(0, failure), 0);

  Failure negative = with_status(503);
  negative.retry_after = "-5";
  negative.retry_after_ms = "-100";
  expect_backoff(policy.decide(3, negative), 3);

  // An unreadable retry-after-ms leaves the Retry-After in charge.
  Failure fallback = with_status(429);
  fallback.retry_after_ms = "1.5s";
  fallback.retry_after = "2";
  EXPECT_DOUBLE_EQ(policy.decide(0, fallback).wait_seconds, 2.0);
}

TEST(RetryPolicyTest, ServerWaitDoesNotMakeFinalRetryable) {
  RetryPolicy policy(5, 15);
  Failure failure = with_status(400);
  failure.retry_after = "1";
  EXPECT_FALSE(policy.decide(0, failure).retry);
  RetryPolicy spent(1, 15);
  Failure busy = with_status(429);
  busy.retry_after = "1";
  EXPECT_FALSE(spent.decide(1, busy).retry);
}

TEST(ParseRetryAfterTest, Seconds) {
  std::optional<double> seconds = parse_retry_after("7");
  ASSERT_TRUE(seconds.has_value());
  EXPECT_DOUBLE_EQ(*seconds, 7.0);
  seconds = parse_retry_after(" 2.5 ");
  ASSERT_TRUE(seconds.has_value());
  EXPECT_DOUBLE_EQ(*seconds, 2.5);
  seconds = parse_retry_after("0");
  ASSERT_TRUE(seconds.has_value());
  EXPECT_DOUBLE_EQ(*seconds, 0.0);
}

TEST(ParseRetryAfterTest, FutureDate) {
  const std::string date = http_date(5);
  std::optional<double> seconds = parse_retry_after(date);
  ASSERT_TRUE(seconds.has_value()) << date;
  EXPECT_GE(*seconds, 3.0) << date;
  EXPECT_LE(*seconds, 5.0) << date;
}

TEST(ParseRetryAfterTest, PastDateIsZero) {
  std::optional<double> seconds = parse_retry_after(http_date(-3600));
  ASSERT_TRUE(seconds.has_value());
  EXPECT_EQ(*seconds, 0.0);
  seconds = parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT");
  ASSERT_TRUE(seconds.has_value());
  EXPECT_EQ(*seconds, 0.0);
}

TEST(ParseRetryAfterTest, GarbageIsNothing) {
  EXPECT_FALSE(parse_retry_after("").has_value());
  EXPECT_FALSE(parse_retry_after("   ").has_value());
  EXPECT_FALSE(parse_retry_after("soon").has_value());
  EXPECT_FALSE(parse_retry_after("5 seconds").has_value());
  EXPECT_FALSE(parse_retry_after("Someday, 99 Foo 20xx").has_value());
}

TEST(ParseRetryAfterTest, DateWithTrailingJunkIsNothing) {
  EXPECT_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT trailing junk").has_value());
  EXPECT_TRUE(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT").has_value());
}

TEST(ParseRetryAfterTest, NegativeIsNothing) {
  EXPECT_FALSE(parse_retry_after("-1").has_value());
  EXPECT_FALSE(parse_retry_after("-0.5").has_value());
}

}  // namespace
}  // namespace tachyon::client
