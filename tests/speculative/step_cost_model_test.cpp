#include "speculative/step_cost_model.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(StepCostModelTest, FitsLocalLinesThroughTheMeasuredSizes) {
  StepCostModel cost;
  EXPECT_DOUBLE_EQ(cost.seconds(3), cost.seconds(1));  // the prior: flat up to 4 tokens
  EXPECT_DOUBLE_EQ(cost.seconds(8), 2 * cost.seconds(4));
  cost.observe(2, 3e-3);
  EXPECT_DOUBLE_EQ(cost.seconds(1), 3e-3);  // one size: the prior's shape through it
  EXPECT_DOUBLE_EQ(cost.seconds(8), 6e-3);
  cost.observe(1, 3e-3);
  cost.observe(4, 4e-3);
  EXPECT_NEAR(cost.seconds(3), 3.5714e-3, 1e-7);  // the least-squares line through 1, 2, 4
  EXPECT_DOUBLE_EQ(cost.seconds(6), 6e-3);  // only 4 nearby: scaled by the prior's shape
  // One slow step of a size weighs little against sizes seen often.
  for (int i = 0; i < 16; ++i) {
    cost.observe(1, 3e-3);
    cost.observe(2, 3e-3);
    cost.observe(3, 3.5e-3);
  }
  cost.observe(5, 20e-3);
  EXPECT_LT(cost.seconds(5), 6e-3);
  // Prompt-sized steps far away do not bend the line near small sizes.
  cost.observe(256, 0.2);
  EXPECT_LT(cost.seconds(3), 4e-3);
  cost.observe(0, 1.0);  // ignored
  cost.observe(3, -1.0);
  EXPECT_TRUE(cost.measured(5));
  EXPECT_FALSE(cost.measured(6));
}

// A memory-bound machine (4 tokens cost what 1 does, then linear): any guesser drafts what is
// free, a hopeless one nothing, and past the free room only guesses likely enough to beat
// the step's rate are verified; once a step is compute-bound (many sequences), drafting stops.
TEST(StepCostModelTest, ChoosesDraftLengthsThatPayOff) {
  StepCostModel cost;
  for (int n = 1; n <= 64; ++n) cost.observe(n, 1e-3 * std::max(4, n) / 4.0);
  // (The fitted lines round the curve's corner at 4: a length or two either side of it.)
  const int good = choose_draft_lengths(cost, 1, {0.95}, {12})[0];
  EXPECT_GE(good, 3);
  EXPECT_LE(good, 6);
  const int poor = choose_draft_lengths(cost, 1, {0.3}, {12})[0];
  EXPECT_GE(poor, 1);
  EXPECT_LE(poor, good);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.0}, {12})[0], 0);
  StepCostModel flatter;  // 8 tokens for the price of 1
  for (int n = 1; n <= 64; ++n) flatter.observe(n, 1e-3 * std::max(8, n) / 8.0);
  const int flat_good = choose_draft_lengths(flatter, 1, {0.95}, {12})[0];
  EXPECT_GE(flat_good, 7);
  EXPECT_GT(flat_good, good);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.95}, {2})[0], 2);  // no more than proposed
  const std::vector<int> busy = choose_draft_lengths(cost, 32, {0.6, 0.6}, {8, 8});
  EXPECT_EQ(busy, (std::vector<int>{0, 0}));
  // Two guessers share the cheap room of a small step.
  const std::vector<int> pair = choose_draft_lengths(cost, 2, {0.5, 0.5}, {8, 8});
  EXPECT_GE(pair[0] + pair[1], 1);
  EXPECT_LE(pair[0] + pair[1], 4);
}

}  // namespace
}  // namespace tachyon
