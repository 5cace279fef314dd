#include "models/expert_placement.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

ExpertLoad::Layer layer_of(int layer, std::vector<uint64_t> counts) {
  ExpertLoad::Layer out;
  out.layer = layer;
  out.counts = std::move(counts);
  return out;
}

TEST(ExpertPlacementTest, ContiguousIsConsecutiveIdRanges) {
  const ExpertPlacement placement = ExpertPlacement::contiguous(9, 2);
  for (int e = 0; e < 9; ++e) {
    EXPECT_EQ(placement.owners(3, e), std::vector<int>{e < 4 ? 0 : 1}) << e;
  }
  EXPECT_EQ(placement.replicas(), 0);
}

// Two hot experts that consecutive ids put on the same rank go to different ranks.
TEST(ExpertPlacementTest, BalancedSpreadsHotExpertsOverTheRanks) {
  const std::vector<ExpertLoad::Layer> load = {
      layer_of(1, {900, 800, 10, 10, 10, 10, 10, 10})};
  Result<ExpertPlacement> placement = ExpertPlacement::balanced(load, 8, 2, 0);
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  EXPECT_NE(placement->owners(1, 0), placement->owners(1, 1));
  EXPECT_LT(placement->rank_imbalance(load[0]),
            ExpertPlacement::contiguous(8, 2).rank_imbalance(load[0]));
  for (int r = 0; r < 2; ++r) {
    int held = 0;
    for (int e = 0; e < 8; ++e) held += placement->owns(1, e, r);
    EXPECT_EQ(held, 4) << "rank " << r;  // no spare slots: 4 experts each
  }
  // A layer without a measured load keeps consecutive ranges.
  EXPECT_EQ(placement->owners(2, 0), std::vector<int>{0});
  EXPECT_EQ(placement->owners(2, 7), std::vector<int>{1});
}

// With spare slots the hottest expert is copied, each copy on another rank, and every expert
// keeps at least one owner.
TEST(ExpertPlacementTest, SpareSlotsCopyTheHottestExperts) {
  const std::vector<ExpertLoad::Layer> load = {layer_of(0, {5000, 10, 10, 10, 10, 10})};
  Result<ExpertPlacement> placement = ExpertPlacement::balanced(load, 6, 3, 1);
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  EXPECT_EQ(placement->owners(0, 0), (std::vector<int>{0, 1, 2}));  // on every rank
  EXPECT_EQ(placement->replicas(), 3);  // 2 copies of expert 0, one of the next hottest
  for (int e = 0; e < 6; ++e) EXPECT_FALSE(placement->owners(0, e).empty()) << e;
  for (int r = 0; r < 3; ++r) {
    int held = 0;
    for (int e = 0; e < 6; ++e) held += placement->owns(0, e, r);
    EXPECT_LE(held, 3) << "rank " << r;  // 2 slots + 1 spare
  }
  EXPECT_LT(placement->rank_imbalance(load[0]), 1.1);
  EXPECT_NE(placement->describe(load).find("3 extra copies"), std::string::npos)
      << placement->describe(load);
}

TEST(ExpertPlacementTest, ImpossiblePlacementsAreClearErrors) {
  EXPECT_FALSE(ExpertPlacement::balanced({}, 2, 3, 0).ok());  // fewer experts than ranks
  Result<ExpertPlacement> wrong = ExpertPlacement::balanced({layer_of(0, {1, 2, 3})}, 4, 2, 0);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("has 3 experts"), std::string::npos);
}

TEST(ExpertLoadFileTest, ReadsTheAdminReportAndBenchJson) {
  const std::string report =
      R"({"layers": [{"layer": 1, "selections": 6, "imbalance": 2.0, "counts": [4, 1, 1, 0]}],
          "max_imbalance": 2.0})";
  Result<std::vector<ExpertLoad::Layer>> load = parse_expert_load(report, 4);
  ASSERT_TRUE(load.ok()) << load.status().message();
  ASSERT_EQ(load->size(), 1u);
  EXPECT_EQ((*load)[0].layer, 1);
  EXPECT_EQ((*load)[0].counts, (std::vector<uint64_t>{4, 1, 1, 0}));
  const std::string bench = R"([{"test": "pp512", "tokens_per_second": 10},
      {"test": "experts", "layers": [{"layer": 2, "counts": [0, 0, 7, 1]}]}])";
  load = parse_expert_load(bench, 4);
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_EQ((*load)[0].layer, 2);
  for (const std::string& bad :
       {std::string("not json"), std::string(R"({"something": 1})"),
        std::string(R"({"layers": [{"layer": 1, "counts": [1, 2]}]})"),
        std::string(R"({"layers": [{"layer": 1, "counts": [1, -2, 3, 4]}]})"),
        std::string(R"({"layers": [{"counts": [1, 2, 3, 4]}]})")}) {
    Result<std::vector<ExpertLoad::Layer>> parsed = parse_expert_load(bad, 4);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace tachyon
