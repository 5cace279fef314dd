#include "speculative/draft_length.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(DraftLengthTest, GrowsOnFullAcceptanceAndShrinksToWhatWasAccepted) {
  DraftLength length(8);
  EXPECT_EQ(length.next(), 8);
  length.observe(8, 3);
  EXPECT_EQ(length.next(), 4);  // 3 accepted + 1
  length.observe(4, 4);
  EXPECT_EQ(length.next(), 6);
  length.observe(6, 6);
  EXPECT_EQ(length.next(), 8);  // capped
  length.observe(0, 0);         // nothing proposed: no change
  EXPECT_EQ(length.next(), 8);
}

TEST(DraftLengthTest, BacksOffAfterMisses) {
  DraftLength length(8);
  length.observe(8, 0);
  EXPECT_EQ(length.next(), 0);  // skips one step
  EXPECT_EQ(length.next(), 4);
  length.observe(4, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(length.next(), 0);
  EXPECT_EQ(length.next(), 2);
  length.observe(2, 0);
  length.observe(1, 0);
  length.observe(1, 0);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(length.next(), 0);  // at most 15 skipped
  EXPECT_EQ(length.next(), 1);
  length.observe(1, 1);  // a hit resets the back-off
  EXPECT_EQ(length.next(), 2);
  DraftLength off(0);
  EXPECT_EQ(off.next(), 0);
}

}  // namespace
}  // namespace tachyon
