#include "core/huge_page_arena.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(HugePageArenaTest, AllocationsAreZeroedAlignedAndDisjoint) {
  HugePageArena arena;
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  // Small pieces share a chunk; the 40 MiB one gets a chunk of its own; then small ones again.
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, size_t{40} << 20, size_t{3},
                       size_t{1} << 20}) {
    uint8_t* p = arena.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0; })) << bytes;
    std::memset(p, 0xab, bytes);
    blocks.emplace_back(p, bytes);
  }
  // Every block still holds what was written to it: none overlaps another.
  for (const auto& [p, bytes] : blocks) {
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0xab; })) << bytes;
  }
  EXPECT_GE(arena.allocated_bytes(), (size_t{41} << 20) + 4096 + 100 + 1 + 3);
}

TEST(HugePageArenaTest, TryAllocateReportsWhatCannotBeMapped) {
  HugePageArena arena;
  // More than the address space: null, nothing counted, and the arena still hands out memory.
  EXPECT_EQ(arena.try_allocate(size_t{1} << 60), nullptr);
  EXPECT_EQ(arena.try_allocate(~size_t{0}), nullptr);
  EXPECT_EQ(arena.allocated_bytes(), 0u);
  uint8_t* p = arena.try_allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(std::all_of(p, p + 4096, [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(arena.allocated_bytes(), 4096u);
}

}  // namespace
}  // namespace tachyon
