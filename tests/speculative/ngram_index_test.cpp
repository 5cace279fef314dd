#include "speculative/ngram_index.h"

#include <gtest/gtest.h>

#include <random>

namespace tachyon {
namespace {

// What a scan would propose: the tokens after the latest earlier occurrence of the longest
// suffix (n from max down to min) that occurred before.
std::vector<TokenId> scan_proposal(const std::vector<TokenId>& tokens, int min_ngram,
                                   int max_ngram, int max_tokens) {
  const int length = static_cast<int>(tokens.size());
  for (int n = std::min(max_ngram, length - 1); n >= min_ngram; --n) {
    for (int end = length - 1; end >= n; --end) {  // an occurrence ending before `end`
      if (std::equal(tokens.end() - n, tokens.end(), tokens.begin() + (end - n))) {
        const int count = std::min(max_tokens, length - end);
        return std::vector<TokenId>(tokens.begin() + end, tokens.begin() + end + count);
      }
    }
  }
  return {};
}

TEST(NgramIndexTest, ProposesWhatFollowedTheLongestEarlierMatch) {
  NgramIndex index(1, 3);
  // "a b c d e | x b c" : the suffix "b c" occurred before, followed by "d e ...".
  std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 9, 2, 3};
  index.extend(tokens);
  std::vector<TokenId> out;
  NgramMatch match = index.propose(tokens, 3, out);
  EXPECT_EQ(match.ngram, 2);
  EXPECT_EQ(out, (std::vector<TokenId>{4, 5, 9}));
  // The latest occurrence wins: after "... 3 7" the suffix "3" continues with 7.
  tokens.insert(tokens.end(), {7, 3});
  index.extend(tokens);
  out.clear();
  match = index.propose(tokens, 4, out);
  EXPECT_EQ(match.ngram, 1);
  EXPECT_EQ(out, (std::vector<TokenId>{7, 3}));  // stops at the end of what is known
}

TEST(NgramIndexTest, NothingToProposeWithoutARepeat) {
  NgramIndex index(1, 4);
  std::vector<TokenId> tokens = {1, 2, 3, 4};
  index.extend(tokens);
  std::vector<TokenId> out;
  EXPECT_EQ(index.propose(tokens, 8, out).num_tokens, 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(index.propose({}, 8, out).num_tokens, 0);
  EXPECT_EQ(index.propose(tokens, 0, out).num_tokens, 0);
}

// Grown a token at a time, the index proposes what a full scan proposes, at every length.
TEST(NgramIndexTest, IncrementalIndexMatchesAScan) {
  std::mt19937 rng(7);
  for (int min_ngram : {1, 2}) {
    NgramIndex index(min_ngram, 4);
    std::vector<TokenId> tokens;
    for (int i = 0; i < 2000; ++i) {
      tokens.push_back(static_cast<TokenId>(rng() % 6));  // a small alphabet repeats often
      index.extend(tokens);
      std::vector<TokenId> out;
      index.propose(tokens, 5, out);
      ASSERT_EQ(out, scan_proposal(tokens, min_ngram, 4, 5)) << "length " << tokens.size();
    }
    index.reset();
    EXPECT_EQ(index.num_entries(), 0u);
  }
}

}  // namespace
}  // namespace tachyon
