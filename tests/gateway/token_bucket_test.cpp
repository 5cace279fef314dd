#include "gateway/token_bucket.h"

#include <gtest/gtest.h>

namespace tachyon::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const TokenBucket::TimePoint kStart{};

TEST(TokenBucketTest, StartsFullAndRefillsContinuously) {
  TokenBucket bucket(30, kStart);  // 30 per minute: one every 2 s
  EXPECT_DOUBLE_EQ(bucket.level(kStart), 30);
  for (int i = 0; i < 30; ++i) EXPECT_TRUE(bucket.try_take(1, kStart));
  EXPECT_FALSE(bucket.try_take(1, kStart));
  EXPECT_DOUBLE_EQ(bucket.seconds_until(1, kStart), 2.0);
  EXPECT_DOUBLE_EQ(bucket.seconds_until_full(kStart), 60.0);
  EXPECT_FALSE(bucket.try_take(1, kStart + milliseconds(1999)));
  EXPECT_TRUE(bucket.try_take(1, kStart + seconds(2)));
  EXPECT_DOUBLE_EQ(bucket.level(kStart + seconds(3)), 0.5);
  EXPECT_DOUBLE_EQ(bucket.level(kStart + seconds(1000)), 30);  // never above capacity
}

TEST(TokenBucketTest, DebtAndRefunds) {
  TokenBucket bucket(600, kStart);  // 10 per second
  bucket.take(700, kStart);
  EXPECT_DOUBLE_EQ(bucket.level(kStart), -100);
  EXPECT_DOUBLE_EQ(bucket.seconds_until(50, kStart), 15.0);
  bucket.give_back(1000, kStart);
  EXPECT_DOUBLE_EQ(bucket.level(kStart), 600);  // capped
  EXPECT_DOUBLE_EQ(bucket.seconds_until(50, kStart), 0);
}

TEST(TokenBucketTest, CapacityChangeKeepsWhatWasUsed) {
  TokenBucket bucket(100, kStart);
  ASSERT_TRUE(bucket.try_take(40, kStart));
  bucket.set_capacity(200, kStart);
  EXPECT_DOUBLE_EQ(bucket.level(kStart), 160);
  bucket.set_capacity(50, kStart);
  EXPECT_DOUBLE_EQ(bucket.level(kStart), 10);
}

TEST(TokenBucketTest, GoDurations) {
  EXPECT_EQ(format_go_duration(0), "0s");
  EXPECT_EQ(format_go_duration(-1), "0s");
  EXPECT_EQ(format_go_duration(0.0001), "1ms");  // rounded up
  EXPECT_EQ(format_go_duration(0.02), "20ms");
  EXPECT_EQ(format_go_duration(0.644), "644ms");
  EXPECT_EQ(format_go_duration(1), "1s");
  EXPECT_EQ(format_go_duration(1.2), "1.2s");
  EXPECT_EQ(format_go_duration(2.0005), "2.001s");
  EXPECT_EQ(format_go_duration(60), "1m0s");
  EXPECT_EQ(format_go_duration(360), "6m0s");
  EXPECT_EQ(format_go_duration(90.5), "1m30.5s");
  EXPECT_EQ(format_go_duration(3600), "1h0m0s");
  EXPECT_EQ(format_go_duration(3725), "1h2m5s");
}

}  // namespace
}  // namespace tachyon::gateway
