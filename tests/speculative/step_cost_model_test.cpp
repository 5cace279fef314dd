#include "speculative/step_cost_model.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(StepCostModelTest, InterpolatesAndExtrapolatesMeasuredSteps) {
  StepCostModel cost;
  EXPECT_DOUBLE_EQ(cost.seconds(3), cost.seconds(1));  // the prior: flat up to 4 tokens
  EXPECT_DOUBLE_EQ(cost.seconds(8), 2 * cost.seconds(4));
  cost.observe(1, 3e-3);
  cost.observe(9, 7e-3);
  EXPECT_DOUBLE_EQ(cost.seconds(1), 3e-3);
  EXPECT_DOUBLE_EQ(cost.seconds(5), 5e-3);            // halfway
  EXPECT_DOUBLE_EQ(cost.seconds(18), 14e-3);          // proportional past the largest
  cost.observe(9, 15e-3);                             // a moving average, weight 1/8
  EXPECT_DOUBLE_EQ(cost.seconds(9), 8e-3);
  cost.observe(0, 1.0);                               // ignored
  cost.observe(3, -1.0);
  EXPECT_DOUBLE_EQ(cost.seconds(3), 3e-3 + 2.0 / 8 * 5e-3);
}

// A memory-bound machine (4 tokens cost what 1 does, then linear): any guesser drafts what is
// free, a hopeless one nothing, and past the free room only guesses likely enough to beat
// the step's rate are verified; once a step is compute-bound (many sequences), drafting stops.
TEST(StepCostModelTest, ChoosesDraftLengthsThatPayOff) {
  StepCostModel cost;
  for (int n = 1; n <= 64; ++n) cost.observe(n, 1e-3 * std::max(4, n) / 4.0);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.95}, {12})[0], 3);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.3}, {12})[0], 3);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.0}, {12})[0], 0);
  StepCostModel flatter;  // 8 tokens for the price of 1
  for (int n = 1; n <= 64; ++n) flatter.observe(n, 1e-3 * std::max(8, n) / 8.0);
  EXPECT_EQ(choose_draft_lengths(flatter, 1, {0.95}, {12})[0], 7);
  EXPECT_EQ(choose_draft_lengths(cost, 1, {0.95}, {2})[0], 2);  // no more than proposed
  const std::vector<int> busy = choose_draft_lengths(cost, 32, {0.6, 0.6}, {8, 8});
  EXPECT_EQ(busy, (std::vector<int>{0, 0}));
  // Two good guessers share the free room of a small step.
  const std::vector<int> pair = choose_draft_lengths(cost, 2, {0.5, 0.5}, {8, 8});
  EXPECT_EQ(pair[0] + pair[1], 2);
}

}  // namespace
}  // namespace tachyon
