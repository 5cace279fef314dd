#include "router/prefix_index.h"

#include <string>

#include <gtest/gtest.h>

namespace tachyon::router {
namespace {

// A lambda, not a function: FunctionRef takes callable objects only.
const auto any_replica = [](int) { return true; };

TEST(PrefixIndexTest, OneKeyPerWholeChunk) {
  PrefixIndex index(/*chunk_bytes=*/4, /*capacity=*/100);
  EXPECT_EQ(index.chunk_bytes(), 4u);
  EXPECT_EQ(index.prefix_keys("abcdefgh").size(), 2u);
  // The partial last chunk gets no key.
  EXPECT_EQ(index.prefix_keys("abcdefghij").size(), 2u);
  EXPECT_EQ(index.prefix_keys("abcd").size(), 1u);
}

TEST(PrefixIndexTest, ShorterThanAChunkHasNoKeys) {
  PrefixIndex index(4, 100);
  EXPECT_TRUE(index.prefix_keys("").empty());
  EXPECT_TRUE(index.prefix_keys("abc").empty());
}

TEST(PrefixIndexTest, KeysAreDeterministic) {
  PrefixIndex a(4, 100), b(4, 100);
  EXPECT_EQ(a.prefix_keys("abcdefgh"), b.prefix_keys("abcdefgh"));
}

TEST(PrefixIndexTest, KeysAreChained) {
  PrefixIndex index(4, 100);
  const std::vector<uint64_t> first = index.prefix_keys("aaaabbbbcccc");
  const std::vector<uint64_t> second = index.prefix_keys("aaaabbbbdddd");
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(first[0], second[0]);
  EXPECT_EQ(first[1], second[1]);
  EXPECT_NE(first[2], second[2]);

  // The same chunk after a different prefix is a different key: a key names the whole prefix.
  const std::vector<uint64_t> other = index.prefix_keys("xxxxbbbbcccc");
  ASSERT_EQ(other.size(), 3u);
  EXPECT_NE(other[1], first[1]);
  EXPECT_NE(other[2], first[2]);
  // And a repeated chunk does not repeat its key.
  const std::vector<uint64_t> repeated = index.prefix_keys("aaaaaaaa");
  EXPECT_NE(repeated[0], repeated[1]);
}

TEST(PrefixIndexTest, EmptyIndexMatchesNothing) {
  PrefixIndex index(4, 100);
  EXPECT_FALSE(index.longest_match(index.prefix_keys("aaaabbbb"), any_replica).has_value());
  EXPECT_FALSE(index.longest_match({}, any_replica).has_value());
  EXPECT_EQ(index.size(), 0u);
}

TEST(PrefixIndexTest, LongestMatchWins) {
  PrefixIndex index(4, 100);
  index.record(index.prefix_keys("aaaa"), 1);
  index.record(index.prefix_keys("aaaabbbbcccc"), 2);
  // Replica 2 overwrote "aaaa" too, so the shared chunk now points at 2.
  std::optional<PrefixIndex::Match> match =
      index.longest_match(index.prefix_keys("aaaabbbbccccdddd"), any_replica);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 2);
  EXPECT_EQ(match->chunks, 3u);

  // A prompt that diverges after the second chunk matches two chunks.
  match = index.longest_match(index.prefix_keys("aaaabbbbzzzz"), any_replica);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 2);
  EXPECT_EQ(match->chunks, 2u);
}

TEST(PrefixIndexTest, LongestMatchRespectsUsable) {
  PrefixIndex index(4, 100);
  index.record(index.prefix_keys("aaaa"), 1);
  index.record(index.prefix_keys("aaaabbbb"), 2);  // overwrites "aaaa" for 2
  index.record(index.prefix_keys("aaaa"), 1);      // and back to 1; "aaaabbbb" stays on 2
  const std::vector<uint64_t> keys = index.prefix_keys("aaaabbbb");

  std::optional<PrefixIndex::Match> match = index.longest_match(keys, any_replica);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 2);
  EXPECT_EQ(match->chunks, 2u);

  // Replica 2 unusable: the shorter prefix held by 1 is the answer.
  match = index.longest_match(keys, [](int replica) { return replica != 2; });
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 1);
  EXPECT_EQ(match->chunks, 1u);

  EXPECT_FALSE(index.longest_match(keys, [](int) { return false; }).has_value());
}

TEST(PrefixIndexTest, RecordOverwritesTheReplica) {
  PrefixIndex index(4, 100);
  const std::vector<uint64_t> keys = index.prefix_keys("aaaabbbb");
  index.record(keys, 0);
  index.record(keys, 3);
  EXPECT_EQ(index.size(), 2u);  // overwritten, not added
  std::optional<PrefixIndex::Match> match = index.longest_match(keys, any_replica);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 3);
  EXPECT_EQ(match->chunks, 2u);
}

TEST(PrefixIndexTest, CapacityEvictsLeastRecentlyUsed) {
  PrefixIndex index(4, /*capacity=*/2);
  const std::vector<uint64_t> a = index.prefix_keys("aaaa");
  const std::vector<uint64_t> b = index.prefix_keys("bbbb");
  const std::vector<uint64_t> c = index.prefix_keys("cccc");
  index.record(a, 0);
  index.record(b, 1);
  index.record(c, 2);  // a is the oldest: it goes
  EXPECT_EQ(index.size(), 2u);
  EXPECT_FALSE(index.longest_match(a, any_replica).has_value());
  EXPECT_TRUE(index.longest_match(b, any_replica).has_value());
  EXPECT_TRUE(index.longest_match(c, any_replica).has_value());
}

TEST(PrefixIndexTest, RecordingAgainRefreshesRecency) {
  PrefixIndex index(4, 2);
  const std::vector<uint64_t> a = index.prefix_keys("aaaa");
  const std::vector<uint64_t> b = index.prefix_keys("bbbb");
  const std::vector<uint64_t> c = index.prefix_keys("cccc");
  index.record(a, 0);
  index.record(b, 1);
  index.record(a, 0);  // a is now newer than b
  index.record(c, 2);  // so b goes
  EXPECT_EQ(index.size(), 2u);
  EXPECT_TRUE(index.longest_match(a, any_replica).has_value());
  EXPECT_FALSE(index.longest_match(b, any_replica).has_value());
  EXPECT_TRUE(index.longest_match(c, any_replica).has_value());
}

TEST(PrefixIndexTest, LongRecordPastCapacityKeepsTheLongestPrefixes) {
  PrefixIndex index(1, 2);
  const std::vector<uint64_t> keys = index.prefix_keys("abcd");
  index.record(keys, 5);
  EXPECT_EQ(index.size(), 2u);
  // The shortest prefixes were recorded first, so they are the ones evicted.
  std::optional<PrefixIndex::Match> match = index.longest_match(keys, any_replica);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->replica, 5);
  EXPECT_EQ(match->chunks, 4u);
  EXPECT_FALSE(index.longest_match(index.prefix_keys("ab"), any_replica).has_value());
}

TEST(PrefixIndexTest, ZeroSizesAreClampedToOne) {
  PrefixIndex index(0, 0);
  EXPECT_EQ(index.chunk_bytes(), 1u);
  EXPECT_EQ(index.prefix_keys("abc").size(), 3u);
  index.record(index.prefix_keys("abc"), 0);
  EXPECT_EQ(index.size(), 1u);
}

}  // namespace
}  // namespace tachyon::router
