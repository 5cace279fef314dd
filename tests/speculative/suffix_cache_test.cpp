#include "speculative/suffix_cache.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(SuffixCacheTest, ProposesFromAnEarlierSequenceOfTheSamePartition) {
  SuffixCache cache(1000);
  cache.add(/*partition=*/1, std::vector<TokenId>{10, 11, 12, 13, 14, 15});
  std::vector<TokenId> out;
  NgramMatch match = cache.propose(1, std::vector<TokenId>{5, 11, 12}, 3, out);
  EXPECT_EQ(match.ngram, 2);
  EXPECT_EQ(out, (std::vector<TokenId>{13, 14, 15}));
}

// Another tenant's text is never proposed, even for the very same context.
TEST(SuffixCacheTest, PartitionsNeverSeeEachOther) {
  SuffixCache cache(1000);
  cache.add(1, std::vector<TokenId>{10, 11, 12, 13, 14, 15});
  std::vector<TokenId> out;
  EXPECT_EQ(cache.propose(2, std::vector<TokenId>{10, 11, 12}, 3, out).num_tokens, 0);
  EXPECT_TRUE(out.empty());
  cache.add(2, std::vector<TokenId>{10, 11, 12, 77});
  EXPECT_EQ(cache.propose(2, std::vector<TokenId>{10, 11, 12}, 3, out).num_tokens, 1);
  EXPECT_EQ(out, (std::vector<TokenId>{77}));
  out.clear();
  cache.propose(1, std::vector<TokenId>{10, 11, 12}, 3, out);
  EXPECT_EQ(out, (std::vector<TokenId>{13, 14, 15}));
}

// Memory stays bounded: the oldest sequences go first, and their index entries with them
// (unless a newer sequence holds the same n-gram).
TEST(SuffixCacheTest, EvictsOldestBeyondItsTokenBudget) {
  SuffixCache cache(10, 2, 2);
  cache.add(1, std::vector<TokenId>{1, 2, 3, 4, 5, 6});
  cache.add(1, std::vector<TokenId>{7, 8, 9, 1, 2});  // 11 tokens in all: the first goes
  EXPECT_EQ(cache.num_sequences(), 1u);
  EXPECT_EQ(cache.num_tokens(), 5);
  EXPECT_EQ(cache.num_entries(), 3u);  // 7 8, 8 9, 9 1 (1 2 has no successor)
  std::vector<TokenId> out;
  EXPECT_EQ(cache.propose(1, std::vector<TokenId>{3, 4}, 2, out).num_tokens, 0);
  EXPECT_EQ(cache.propose(1, std::vector<TokenId>{8, 9}, 2, out).num_tokens, 2);
  EXPECT_EQ(out, (std::vector<TokenId>{1, 2}));
  // A sequence longer than the whole budget keeps its end.
  std::vector<TokenId> long_sequence;
  for (int i = 0; i < 50; ++i) long_sequence.push_back(100 + i);
  cache.add(1, long_sequence);
  EXPECT_EQ(cache.num_tokens(), 10);
  EXPECT_EQ(cache.num_sequences(), 1u);
  SuffixCache disabled(0);
  disabled.add(1, long_sequence);
  EXPECT_EQ(disabled.num_sequences(), 0u);
}

}  // namespace
}  // namespace tachyon
