#include "gateway/usage_ledger.h"

#include <gtest/gtest.h>

#include "temp_database.h"

namespace tachyon::gateway {
namespace {

// 2024-03-10 12:00:00 UTC
constexpr int64_t kNoon = 1710072000;

UsageRecord make_record(std::string id, std::string key, int64_t key_id, int64_t unix_time,
                        int64_t prompt, int64_t completion, std::string status = "ok") {
  UsageRecord record;
  record.request_id = std::move(id);
  record.key_name = std::move(key);
  record.key_id = key_id;
  record.model = record.key_name + "-model";  // (a literal here trips GCC 12's -Wrestrict)
  record.unix_time = unix_time;
  record.prompt_tokens = prompt;
  record.cached_tokens = prompt / 2;
  record.completion_tokens = completion;
  record.status = std::move(status);
  record.finish_reason = "stop";
  return record;
}

TEST(UsageLedgerTest, SameRequestIdCountsOnce) {
  TempDatabase db;
  Result<std::unique_ptr<UsageLedger>> ledger = UsageLedger::open(db.path());
  ASSERT_TRUE(ledger.ok()) << ledger.status().message();
  Result<bool> first = (*ledger)->record(make_record("req-1", "alice", 1, kNoon, 10, 5));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(*first);
  Result<bool> replay = (*ledger)->record(make_record("req-1", "alice", 1, kNoon, 10, 5));
  ASSERT_TRUE(replay.ok());
  EXPECT_FALSE(*replay);
  EXPECT_EQ(*(*ledger)->tokens_since(1, 0), 15);
  EXPECT_EQ((*ledger)->record(make_record("", "alice", 1, kNoon, 1, 1)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(UsageLedgerTest, SurvivesReopeningAndSummarizes) {
  TempDatabase db;
  {
    Result<std::unique_ptr<UsageLedger>> ledger = UsageLedger::open(db.path());
    ASSERT_TRUE(ledger.ok());
    ASSERT_TRUE((*ledger)->record(make_record("a", "alice", 1, kNoon - 86400, 100, 10)).ok());
    ASSERT_TRUE((*ledger)->record(make_record("b", "alice", 1, kNoon, 20, 2, "error")).ok());
    ASSERT_TRUE((*ledger)->record(make_record("c", "bob", 2, kNoon, 30, 3, "cancelled")).ok());
  }
  Result<std::unique_ptr<UsageLedger>> ledger = UsageLedger::open(db.path(), OpenMode::kExisting);
  ASSERT_TRUE(ledger.ok());
  EXPECT_EQ(*(*ledger)->tokens_since(1, kNoon - 3600), 22);
  EXPECT_EQ(*(*ledger)->tokens_since(1, 0), 132);

  Result<std::vector<UsageSummary>> by_key = (*ledger)->summarize(UsageQuery{});
  ASSERT_TRUE(by_key.ok()) << by_key.status().message();
  ASSERT_EQ(by_key->size(), 2u);
  EXPECT_EQ((*by_key)[0].group, "alice");
  EXPECT_EQ((*by_key)[0].requests, 2);
  EXPECT_EQ((*by_key)[0].prompt_tokens, 120);
  EXPECT_EQ((*by_key)[0].cached_tokens, 60);
  EXPECT_EQ((*by_key)[0].completion_tokens, 12);
  EXPECT_EQ((*by_key)[0].errors, 1);
  EXPECT_EQ((*by_key)[1].group, "bob");
  EXPECT_EQ((*by_key)[1].cancelled, 1);

  UsageQuery query;
  query.group_by = UsageGrouping::kDay;
  query.key_name = "alice";
  Result<std::vector<UsageSummary>> by_day = (*ledger)->summarize(query);
  ASSERT_TRUE(by_day.ok());
  ASSERT_EQ(by_day->size(), 2u);
  EXPECT_EQ((*by_day)[0].group, "2024-03-09");
  EXPECT_EQ((*by_day)[1].group, "2024-03-10");
  query.since_unix = kNoon - 3600;
  by_day = (*ledger)->summarize(query);
  ASSERT_TRUE(by_day.ok());
  ASSERT_EQ(by_day->size(), 1u);
  EXPECT_EQ((*by_day)[0].requests, 1);
}

}  // namespace
}  // namespace tachyon::gateway
