#include "gateway/gateway.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "temp_database.h"

namespace tachyon::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// 2024-03-10 12:00:00 UTC
constexpr int64_t kNoon = 1710072000;

class GatewayTest : public ::testing::Test {
 protected:
  GatewayOptions options() {
    GatewayOptions options;
    options.clock.steady = [this] { return now_; };
    options.clock.unix_seconds = [this] { return unix_; };
    return options;
  }
  void advance(std::chrono::duration<double> step) {
    now_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(step);
    unix_ += static_cast<int64_t>(step.count());
  }
  static Tenant tenant(KeyPolicy policy, int64_t id = 1, std::string name = "alice") {
    return Tenant{id, std::move(name), std::move(policy)};
  }
  static KeyPolicy rpm(int64_t limit) {
    KeyPolicy policy;
    policy.requests_per_minute = limit;
    return policy;
  }

  std::chrono::steady_clock::time_point now_{};
  int64_t unix_ = kNoon;
};

const Rejection* rejection_of(const AdmitResult& result) {
  return std::get_if<Rejection>(&result);
}

UsageRecord usage(std::string request_id, int64_t prompt_tokens, int64_t completion_tokens) {
  UsageRecord record;
  record.request_id = std::move(request_id);
  record.prompt_tokens = prompt_tokens;
  record.completion_tokens = completion_tokens;
  record.finish_reason = "stop";
  return record;
}

TEST_F(GatewayTest, AuthenticatesBearerKeysFromStoreAndStaticList) {
  TempDatabase db;
  std::shared_ptr<KeyStore> store = KeyStore::open(db.path()).value();
  Result<CreatedKey> created = store->create("alice", tier_defaults(Tier::kFree));
  ASSERT_TRUE(created.ok());
  Gateway gateway(store, {"static-one", "static-two"}, nullptr, options());

  for (const char* scheme : {"Bearer ", "bearer ", "BEARER  "}) {
    Result<Tenant> tenant = gateway.authenticate(scheme + created->secret);
    ASSERT_TRUE(tenant.ok()) << scheme << tenant.status().message();
    EXPECT_EQ(tenant->name, "alice");
    EXPECT_EQ(tenant->key_id, created->key.id);
    EXPECT_EQ(tenant->policy.requests_per_minute, 20);
  }
  Result<Tenant> second = gateway.authenticate("Bearer static-two");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->name, "static-2");
  EXPECT_TRUE(second->is_static());
  EXPECT_EQ(second->policy, unlimited_policy());

  for (const char* header : {"", "Bearer", "Bearer   ", "Basic abc", created->secret.c_str()}) {
    Result<Tenant> missing = gateway.authenticate(header);
    ASSERT_FALSE(missing.ok()) << header;
    EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(missing.status().message().starts_with("You didn't provide an API key."));
  }
  const std::string wrong = created->secret.substr(0, created->secret.size() - 4) + "abcd";
  Result<Tenant> unknown = gateway.authenticate("Bearer " + wrong);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "Incorrect API key provided: sk-tac***...abcd. Keys are created with `tachyon keys "
            "create`.");
  EXPECT_EQ(gateway.metrics().authentication_failures, 6u);
}

TEST_F(GatewayTest, RevokeAndUpdateFromAnotherProcessTakeEffectWithinTheCacheTtl) {
  TempDatabase db;
  std::shared_ptr<KeyStore> store = KeyStore::open(db.path()).value();
  Result<CreatedKey> created = store->create("alice", rpm(10));
  ASSERT_TRUE(created.ok());
  Gateway gateway(store, {}, nullptr, options());
  const std::string header = "Bearer " + created->secret;
  ASSERT_TRUE(gateway.authenticate(header).ok());

  // Another connection stands in for `tachyon keys update` / `revoke` in another process.
  std::unique_ptr<KeyStore> other = KeyStore::open(db.path(), OpenMode::kExisting).value();
  KeyPolicyChange change;
  change.requests_per_minute = 99;
  ASSERT_TRUE(other->update("alice", change).ok());
  advance(milliseconds(500));
  EXPECT_EQ(gateway.authenticate(header)->policy.requests_per_minute, 10);  // cached
  advance(milliseconds(600));
  EXPECT_EQ(gateway.authenticate(header)->policy.requests_per_minute, 99);

  ASSERT_TRUE(other->revoke("alice").ok());
  advance(milliseconds(1001));
  Result<Tenant> revoked = gateway.authenticate(header);
  ASSERT_FALSE(revoked.ok());
  EXPECT_EQ(revoked.status().code(), StatusCode::kNotFound);
}

TEST_F(GatewayTest, BurstAgainstRpmIsExactUnderConcurrency) {
  Gateway gateway(nullptr, {}, nullptr, options());
  const Tenant alice = tenant(rpm(30));
  std::atomic<int> admitted = 0;
  std::atomic<int> rejected = 0;
  std::atomic<int> wrong_retry_after = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2; ++i) {
        AdmitResult result = gateway.admit(alice, "m", 10, 10);
        if (const Rejection* rejection = rejection_of(result)) {
          ++rejected;
          if (rejection->retry_after_seconds != 2.0 || rejection->type != "requests")
            ++wrong_retry_after;
        } else {
          ++admitted;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(admitted.load(), 30);
  EXPECT_EQ(rejected.load(), 10);
  EXPECT_EQ(wrong_retry_after.load(), 0);

  AdmitResult too_soon = gateway.admit(alice, "m", 10, 10);
  ASSERT_NE(rejection_of(too_soon), nullptr);
  const Rejection& rejection = *rejection_of(too_soon);
  EXPECT_EQ(rejection.http_status, 429);
  EXPECT_EQ(rejection.code, "rate_limit_exceeded");
  EXPECT_TRUE(rejection.should_retry);
  EXPECT_EQ(rejection.message,
            "Rate limit reached for m in organization alice on requests per min (RPM): Limit 30, "
            "Used 30, Requested 1. Please try again in 2s.");

  // A client that honours Retry-After gets in; the one after it waits again.
  advance(std::chrono::duration<double>(*rejection.retry_after_seconds));
  EXPECT_EQ(rejection_of(gateway.admit(alice, "m", 10, 10)), nullptr);
  AdmitResult next = gateway.admit(alice, "m", 10, 10);
  ASSERT_NE(rejection_of(next), nullptr);
  EXPECT_DOUBLE_EQ(*rejection_of(next)->retry_after_seconds, 2.0);
  advance(milliseconds(700));
  EXPECT_DOUBLE_EQ(*rejection_of(gateway.admit(alice, "m", 10, 10))->retry_after_seconds, 1.3);

  GatewayMetrics metrics = gateway.metrics();
  ASSERT_EQ(metrics.tenants.size(), 1u);
  EXPECT_EQ(metrics.tenants[0].key_name, "alice");
  EXPECT_EQ(metrics.tenants[0].requests_admitted, 31u);
  EXPECT_EQ(metrics.tenants[0].rejections.at(kReasonRequests), 13u);
}

TEST_F(GatewayTest, ChecksRunInOrder) {
  Gateway gateway(nullptr, {}, nullptr, options());
  KeyPolicy policy = rpm(2);
  policy.tokens_per_minute = 1000;
  policy.max_tokens = 500;
  policy.max_concurrent_requests = 1;
  policy.models = {"small", "tiny"};
  const Tenant alice = tenant(policy);
  ASSERT_EQ(rejection_of(gateway.admit(alice, "small", 10, 10)), nullptr);  // dropped at once

  const Rejection* model = nullptr;
  AdmitResult result = gateway.admit(alice, "large", 10, 10000);
  ASSERT_NE(model = rejection_of(result), nullptr);
  EXPECT_EQ(model->http_status, 403);
  EXPECT_EQ(model->type, "permission_error");
  EXPECT_EQ(model->code, "model_not_allowed");
  EXPECT_EQ(model->param, "model");
  EXPECT_EQ(model->message,
            "This API key does not have access to model `large`. It may use: small, tiny.");

  result = gateway.admit(alice, "small", 10, 600);
  ASSERT_NE(rejection_of(result), nullptr);
  EXPECT_EQ(rejection_of(result)->http_status, 400);
  EXPECT_EQ(rejection_of(result)->param, "max_tokens");
  EXPECT_EQ(rejection_of(result)->message,
            "max_tokens is too large: 600. This API key allows at most 500 completion tokens, "
            "whereas you provided 600.");

  result = gateway.admit(alice, "small", 800, 300);
  ASSERT_NE(rejection_of(result), nullptr);
  EXPECT_EQ(rejection_of(result)->type, "tokens");
  EXPECT_FALSE(rejection_of(result)->should_retry);
  EXPECT_FALSE(rejection_of(result)->retry_after_seconds.has_value());
  EXPECT_EQ(rejection_of(result)->message,
            "Request too large for small in organization alice on tokens per min (TPM): Limit "
            "1000, Requested 1100. The input or output tokens must be reduced in order to run "
            "successfully.");

  // No max_tokens: the key's cap is charged and handed to the server.
  AdmitResult held = gateway.admit(alice, "small", 400, std::nullopt);
  ASSERT_EQ(rejection_of(held), nullptr) << rejection_of(held)->message;
  EXPECT_EQ(std::get<Admission>(held).max_tokens(), 500);
  EXPECT_EQ(std::get<Admission>(held).charged_tokens(), 900);

  result = gateway.admit(alice, "small", 10, 10);
  ASSERT_NE(rejection_of(result), nullptr);
  EXPECT_EQ(rejection_of(result)->reason, kReasonConcurrency);
  EXPECT_EQ(rejection_of(result)->retry_after_seconds, 1.0);
  EXPECT_EQ(rejection_of(result)->message,
            "Rate limit reached for small in organization alice on concurrent requests: Limit 1, "
            "Used 1, Requested 1. Please try again in 1s.");

  ASSERT_TRUE(std::get<Admission>(held).finish(usage("r1", 400, 20)).ok());
  result = gateway.admit(alice, "small", 10, 10);
  ASSERT_NE(rejection_of(result), nullptr);
  EXPECT_EQ(rejection_of(result)->reason, kReasonRequests);
}

TEST_F(GatewayTest, TokenBucketChargesMaxTokensAndRefundsTheRest) {
  Gateway gateway(nullptr, {}, nullptr, options());
  KeyPolicy policy;
  policy.tokens_per_minute = 600;  // 10 tokens per second
  const Tenant alice = tenant(policy);
  AdmitResult first = gateway.admit(alice, "m", 100, 200);
  AdmitResult second = gateway.admit(alice, "m", 100, 200);
  ASSERT_EQ(rejection_of(first), nullptr);
  ASSERT_EQ(rejection_of(second), nullptr);
  AdmitResult third = gateway.admit(alice, "m", 100, 200);
  ASSERT_NE(rejection_of(third), nullptr);
  EXPECT_EQ(rejection_of(third)->type, "tokens");
  EXPECT_EQ(rejection_of(third)->retry_after_seconds, 30.0);
  EXPECT_EQ(rejection_of(third)->message,
            "Rate limit reached for m in organization alice on tokens per min (TPM): Limit 600, "
            "Used 600, Requested 300. Please try again in 30s.");

  // 150 of the 300 charged were not used: refunded.
  ASSERT_TRUE(std::get<Admission>(first).finish(usage("a", 100, 50)).ok());
  third = gateway.admit(alice, "m", 100, 200);
  ASSERT_NE(rejection_of(third), nullptr);
  EXPECT_EQ(rejection_of(third)->retry_after_seconds, 15.0);
  advance(seconds(15));
  third = gateway.admit(alice, "m", 100, 200);
  ASSERT_EQ(rejection_of(third), nullptr);

  // Using more than was charged (no max_tokens given) leaves a debt later requests wait out.
  ASSERT_TRUE(std::get<Admission>(second).finish(usage("b", 100, 200)).ok());
  ASSERT_TRUE(std::get<Admission>(third).finish(usage("c", 100, 500)).ok());
  AdmitResult fourth = gateway.admit(alice, "m", 10, 0);
  ASSERT_NE(rejection_of(fourth), nullptr);
  EXPECT_EQ(rejection_of(fourth)->retry_after_seconds, 31.0);  // level -300, needs 10

  GatewayMetrics metrics = gateway.metrics();
  EXPECT_EQ(metrics.tenants[0].prompt_tokens, 300u);
  EXPECT_EQ(metrics.tenants[0].completion_tokens, 750u);
  EXPECT_EQ(metrics.tenants[0].requests_finished, 3u);
  EXPECT_EQ(metrics.tenants[0].in_flight, 0);
}

TEST_F(GatewayTest, QuotasAreRebuiltFromTheLedgerAfterReopening) {
  TempDatabase db;
  int64_t key_id = 0;
  std::string secret;
  {
    Result<std::unique_ptr<KeyStore>> store = KeyStore::open(db.path());
    KeyPolicy policy;
    policy.daily_tokens = 100;
    policy.monthly_tokens = 250;
    Result<CreatedKey> created = (*store)->create("alice", policy);
    ASSERT_TRUE(created.ok());
    key_id = created->key.id;
    secret = created->secret;
  }
  {
    Result<std::unique_ptr<Gateway>> gateway = Gateway::open(db.path(), {}, options());
    ASSERT_TRUE(gateway.ok()) << gateway.status().message();
    Result<Tenant> alice = (*gateway)->authenticate("Bearer " + secret);
    ASSERT_TRUE(alice.ok());
    AdmitResult first = (*gateway)->admit(*alice, "m", 60, 1000);
    ASSERT_EQ(rejection_of(first), nullptr);  // below the quota: admitted, whatever it asks
    ASSERT_TRUE(std::get<Admission>(first).finish(usage("r1", 60, 50)).ok());
    AdmitResult second = (*gateway)->admit(*alice, "m", 1, 1);
    ASSERT_NE(rejection_of(second), nullptr);
    const Rejection& quota = *rejection_of(second);
    EXPECT_EQ(quota.http_status, 429);
    EXPECT_EQ(quota.type, "insufficient_quota");
    EXPECT_EQ(quota.code, "insufficient_quota");
    EXPECT_FALSE(quota.should_retry);
    EXPECT_EQ(quota.retry_after_seconds, 12 * 3600.0);
    EXPECT_EQ(quota.message,
              "You exceeded your current quota, please check your plan and billing details. API "
              "key alice has used 110 of its 100 daily tokens; the quota resets at 00:00 UTC (in "
              "12h0m0s).");
    EXPECT_EQ((*gateway)->metrics().tenants[0].rejections.at(kReasonDailyQuota), 1u);
  }
  // A restarted server knows what was spent today.
  Result<std::unique_ptr<Gateway>> gateway = Gateway::open(db.path(), {}, options());
  ASSERT_TRUE(gateway.ok());
  Result<Tenant> alice = (*gateway)->authenticate("Bearer " + secret);
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->key_id, key_id);
  EXPECT_EQ(rejection_of((*gateway)->admit(*alice, "m", 1, 1))->reason, kReasonDailyQuota);

  // Tomorrow: a new day, the same month (110 of 250 used).
  advance(seconds(86400));
  AdmitResult next_day = (*gateway)->admit(*alice, "m", 1, 1);
  ASSERT_EQ(rejection_of(next_day), nullptr);
  ASSERT_TRUE(std::get<Admission>(next_day).finish(usage("r2", 90, 60)).ok());
  AdmitResult month_spent = (*gateway)->admit(*alice, "m", 1, 1);
  ASSERT_NE(rejection_of(month_spent), nullptr);
  EXPECT_EQ(rejection_of(month_spent)->reason, kReasonDailyQuota);  // 150 >= 100 today too
  advance(seconds(86400));
  month_spent = (*gateway)->admit(*alice, "m", 1, 1);
  ASSERT_NE(rejection_of(month_spent), nullptr);
  EXPECT_EQ(rejection_of(month_spent)->reason, kReasonMonthlyQuota);  // 260 >= 250
  // 2024-03-12 12:00 → 2024-04-01 00:00 is 19.5 days.
  EXPECT_EQ(rejection_of(month_spent)->retry_after_seconds, 19.5 * 86400);
  advance(seconds(20 * 86400));
  EXPECT_EQ(rejection_of((*gateway)->admit(*alice, "m", 1, 1)), nullptr);
}

TEST_F(GatewayTest, FinishIsIdempotentPerRequestId) {
  TempDatabase db;
  Result<std::unique_ptr<Gateway>> gateway = Gateway::open(db.path(), {}, options());
  ASSERT_TRUE(gateway.ok());
  KeyPolicy policy;
  policy.daily_tokens = 1000;
  const Tenant alice = tenant(policy, 7, "alice");
  for (int i = 0; i < 2; ++i) {
    AdmitResult result = (*gateway)->admit(alice, "m", 300, 100);
    ASSERT_EQ(rejection_of(result), nullptr);
    Admission& admission = std::get<Admission>(result);
    ASSERT_TRUE(admission.finish(usage("same-id", 300, 200)).ok());  // a replayed record
    EXPECT_FALSE(admission.finish(usage("other", 1, 1)).ok());       // finish() runs once
  }
  EXPECT_EQ(*(*gateway)->ledger()->tokens_since(7, 0), 500);
  GatewayMetrics metrics = (*gateway)->metrics();
  EXPECT_EQ(metrics.tenants[0].prompt_tokens, 300u);
  EXPECT_EQ(metrics.tenants[0].requests_finished, 2u);
  Result<std::vector<UsageSummary>> rows = (*gateway)->ledger()->summarize(UsageQuery{});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].group, "alice");  // key name and id come from the admission
  EXPECT_EQ((*rows)[0].requests, 1);
}

// A refused request is in the ledger (status "rejected", its reason) but spends no quota.
TEST_F(GatewayTest, RejectionsAreRecordedWithoutTokens) {
  TempDatabase db;
  Result<std::unique_ptr<Gateway>> gateway = Gateway::open(db.path(), {}, options());
  ASSERT_TRUE(gateway.ok());
  KeyPolicy policy;
  policy.daily_tokens = 1000;
  policy.models = {"m"};
  const Tenant alice = tenant(policy, 7, "alice");
  AdmitResult admitted = (*gateway)->admit(alice, "m", 300, 100, "ok-1");
  ASSERT_EQ(rejection_of(admitted), nullptr);
  ASSERT_TRUE(std::get<Admission>(admitted).finish(usage("ok-1", 300, 100)).ok());
  ASSERT_NE(rejection_of((*gateway)->admit(alice, "other-model", 10, 10, "refused-1")), nullptr);
  ASSERT_NE(rejection_of((*gateway)->admit(alice, "other-model", 10, 10)), nullptr);  // no id
  EXPECT_EQ(*(*gateway)->ledger()->tokens_since(7, 0), 400);
  Result<std::vector<UsageSummary>> rows = (*gateway)->ledger()->summarize(UsageQuery{});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].requests, 2);
  EXPECT_EQ((*rows)[0].rejected, 1);
  EXPECT_EQ((*rows)[0].prompt_tokens, 300);
}

TEST_F(GatewayTest, AbandonedAdmissionFreesItsSlot) {
  Gateway gateway(nullptr, {}, nullptr, options());
  KeyPolicy policy;
  policy.max_concurrent_requests = 1;
  const Tenant alice = tenant(policy);
  {
    AdmitResult held = gateway.admit(alice, "m", 1, 1);
    ASSERT_EQ(rejection_of(held), nullptr);
    EXPECT_NE(rejection_of(gateway.admit(alice, "m", 1, 1)), nullptr);
    Admission moved = std::move(std::get<Admission>(held));
    EXPECT_EQ(gateway.metrics().tenants[0].in_flight, 1);
  }
  EXPECT_EQ(gateway.metrics().tenants[0].in_flight, 0);
  EXPECT_EQ(rejection_of(gateway.admit(alice, "m", 1, 1)), nullptr);
}

TEST_F(GatewayTest, RateLimitHeaders) {
  Gateway gateway(nullptr, {"s3cret"}, nullptr, options());
  KeyPolicy policy = rpm(30);
  policy.tokens_per_minute = 600;
  const Tenant alice = tenant(policy);
  using Headers = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(gateway.rate_limit_headers(alice), (Headers{{"x-ratelimit-limit-requests", "30"},
                                                        {"x-ratelimit-limit-tokens", "600"},
                                                        {"x-ratelimit-remaining-requests", "30"},
                                                        {"x-ratelimit-remaining-tokens", "600"},
                                                        {"x-ratelimit-reset-requests", "0s"},
                                                        {"x-ratelimit-reset-tokens", "0s"}}));
  AdmitResult result = gateway.admit(alice, "m", 60, 40);
  ASSERT_EQ(rejection_of(result), nullptr);
  advance(milliseconds(500));
  EXPECT_EQ(gateway.rate_limit_headers(alice), (Headers{{"x-ratelimit-limit-requests", "30"},
                                                        {"x-ratelimit-limit-tokens", "600"},
                                                        {"x-ratelimit-remaining-requests", "29"},
                                                        {"x-ratelimit-remaining-tokens", "505"},
                                                        {"x-ratelimit-reset-requests", "1.5s"},
                                                        {"x-ratelimit-reset-tokens", "9.5s"}}));
  // Unlimited keys get no placeholders; a key with only an RPM limit gets only those.
  EXPECT_TRUE(gateway.rate_limit_headers(*gateway.authenticate("Bearer s3cret")).empty());
  EXPECT_EQ(gateway.rate_limit_headers(tenant(rpm(5), 2, "bob")).size(), 3u);
}

}  // namespace
}  // namespace tachyon::gateway
