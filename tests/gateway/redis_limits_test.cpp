// RedisLimits against a real redis-server (started here on a free loopback port).
#include "gateway/redis_limits.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace tachyon::gateway {
namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

class RedisLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = free_port();
    start_redis();
    Result<std::unique_ptr<RedisLimits>> limits = RedisLimits::connect(url(), false);
    ASSERT_TRUE(limits.ok()) << limits.status().message();
    limits_ = std::move(*limits);
  }
  void TearDown() override { stop_redis(); }

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  void start_redis() {
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--loglevel", "warning", nullptr);
      ::_exit(127);
    }
    // Ready once it accepts a connection.
    for (int i = 0; i < 200; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<uint16_t>(port_));
      const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
      ::close(fd);
      if (up) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "redis-server did not start (is it installed? make setup installs it)";
  }
  void stop_redis() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  SharedLimitsCheck check(int64_t key_id) const {
    SharedLimitsCheck check;
    check.key_id = key_id;
    check.day = 20000;
    check.month = 24300;
    return check;
  }

  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<RedisLimits> limits_;
};

TEST(RedisUrlTest, Parses) {
  Result<RedisAddress> address = parse_redis_url("redis://:secret@cache.local:6380/2");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address->host, "cache.local");
  EXPECT_EQ(address->port, 6380);
  EXPECT_EQ(address->database, 2);
  EXPECT_EQ(address->password, "secret");
  address = parse_redis_url("redis://10.0.0.5");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address->port, 6379);
  EXPECT_FALSE(parse_redis_url("http://x:1").ok());
  EXPECT_FALSE(parse_redis_url("redis://x:99999").ok());
  EXPECT_FALSE(parse_redis_url("redis://x:1/abc").ok());
}

TEST_F(RedisLimitsTest, RequestsPerMinuteBucket) {
  SharedLimitsCheck c = check(1);
  c.requests_per_minute = 3;
  for (int i = 0; i < 3; ++i) {
    Result<SharedDecision> decision = limits_->admit(c);
    ASSERT_TRUE(decision.ok()) << decision.status().message();
    EXPECT_EQ(decision->kind, SharedDecision::Kind::kAdmitted);
  }
  Result<SharedDecision> refused = limits_->admit(c);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->kind, SharedDecision::Kind::kRequests);
  EXPECT_EQ(refused->used, 3);
  // One request refills in 20 s at 3 per minute.
  EXPECT_GT(refused->wait_seconds, 19.0);
  EXPECT_LE(refused->wait_seconds, 20.001);
  // A second connection (another replica) sees the same bucket.
  Result<std::unique_ptr<RedisLimits>> other = RedisLimits::connect(url(), false);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->admit(c)->kind, SharedDecision::Kind::kRequests);
}

TEST_F(RedisLimitsTest, TokensChargedThenSettled) {
  SharedLimitsCheck c = check(2);
  c.tokens_per_minute = 100;
  c.charge = 80;
  ASSERT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kTokens);  // 20 left
  // It used 30 of its 80: 50 come back.
  ASSERT_TRUE(limits_->finish(2, 100, 80, 30, true, c.day, c.month).ok());
  Result<RedisLimits::Levels> levels = limits_->levels(2, 0, 100);
  ASSERT_TRUE(levels.ok());
  EXPECT_NEAR(levels->tokens, 70, 0.5);
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kTokens);  // 70 < 80
  c.charge = 60;
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
}

TEST_F(RedisLimitsTest, ConcurrencySlotsFreedByFinish) {
  SharedLimitsCheck c = check(3);
  c.max_concurrent = 2;
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
  Result<SharedDecision> refused = limits_->admit(c);
  EXPECT_EQ(refused->kind, SharedDecision::Kind::kConcurrency);
  EXPECT_EQ(refused->used, 2);
  ASSERT_TRUE(limits_->finish(3, 0, 0, 0, false, c.day, c.month).ok());
  EXPECT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
}

TEST_F(RedisLimitsTest, QuotaSeededFromTheLedgerThenCounted) {
  SharedLimitsCheck c = check(4);
  c.daily_tokens = 100;
  Result<SharedDecision> unseeded = limits_->admit(c);
  ASSERT_FALSE(unseeded.ok());
  EXPECT_EQ(unseeded.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(limits_->seed_quota(4, c.day, c.month, 90, 90).ok());
  // Seeding again (another replica, later) does not overwrite the live counter.
  ASSERT_TRUE(limits_->seed_quota(4, c.day, c.month, 0, 0).ok());
  ASSERT_EQ(limits_->admit(c)->kind, SharedDecision::Kind::kAdmitted);
  ASSERT_TRUE(limits_->finish(4, 0, 0, 15, true, c.day, c.month).ok());
  Result<SharedDecision> spent = limits_->admit(c);
  EXPECT_EQ(spent->kind, SharedDecision::Kind::kDailyQuota);
  EXPECT_EQ(spent->used, 105);
  // A replayed request (counted = false) adds nothing.
  ASSERT_TRUE(limits_->finish(4, 0, 0, 50, false, c.day, c.month).ok());
  EXPECT_EQ(limits_->admit(c)->used, 105);
}

TEST_F(RedisLimitsTest, UnreachableIsUnavailableThenRecovers) {
  stop_redis();
  SharedLimitsCheck c = check(5);
  c.requests_per_minute = 10;
  Result<SharedDecision> down = limits_->admit(c);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  start_redis();
  // The next attempt after the reconnect pause (250 ms) reconnects and reloads the scripts.
  bool recovered = false;
  for (int i = 0; i < 40 && !recovered; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Result<SharedDecision> decision = limits_->admit(c);
    recovered = decision.ok() && decision->kind == SharedDecision::Kind::kAdmitted;
  }
  EXPECT_TRUE(recovered);
}

TEST(RedisLimitsConnectTest, NothingListeningIsAClearError) {
  Result<std::unique_ptr<RedisLimits>> limits =
      RedisLimits::connect("redis://127.0.0.1:" + std::to_string(free_port()), false);
  ASSERT_FALSE(limits.ok());
  EXPECT_EQ(limits.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(limits.status().message().find("unreachable"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::gateway
