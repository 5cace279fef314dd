#include "core/dtype.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tachyon {
namespace {

TEST(DTypeTest, IdsRoundTripAndNamesAreUnique) {
  std::set<std::string> names;
  for (uint32_t id = 0; id < 64; ++id) {
    const std::optional<DTypeInfo> info = dtype_info(id);
    if (!info) continue;
    EXPECT_EQ(static_cast<uint32_t>(info->type), id);
    EXPECT_EQ(dtype_name(info->type), info->name);
    EXPECT_GT(info->block_elements, 0u) << info->name;
    EXPECT_GT(info->block_bytes, 0u) << info->name;
    EXPECT_TRUE(names.insert(std::string(info->name)).second) << info->name;
  }
}

TEST(DTypeTest, UnassignedIdsAreUnknown) {
  for (uint32_t id : {1000u, 0xffffffffu}) EXPECT_FALSE(dtype_info(id)) << id;
}

TEST(DTypeTest, KnownBlockLayouts) {
  EXPECT_EQ(dtype_info(DType::kQ4_K).block_elements, 256u);
  EXPECT_EQ(dtype_info(DType::kQ4_K).block_bytes, 144u);
  EXPECT_EQ(dtype_info(DType::kQ8_0).block_bytes, 34u);
  EXPECT_EQ(dtype_info(DType::kBF16).block_bytes, 2u);
}

}  // namespace
}  // namespace tachyon
