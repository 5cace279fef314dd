#include "kv_cache/kv_block_pool.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

BlockHash hash_of(int32_t token) {
  const int32_t tokens[] = {token};
  return BlockHash::chain(BlockHash::root(""), tokens);
}

TEST(KvBlockPoolTest, AllocatesAndReleases) {
  KvBlockPool pool(4, true);
  EXPECT_EQ(pool.num_available(), 4);
  std::optional<std::vector<BlockId>> blocks = pool.allocate(3);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(pool.num_held(), 3);
  EXPECT_FALSE(pool.allocate(2)) << "only one block is left";
  EXPECT_EQ(pool.num_held(), 3) << "a failed allocation takes nothing";
  pool.release(*blocks);
  EXPECT_EQ(pool.num_available(), 4);
  EXPECT_EQ(pool.num_cached(), 0);
}

TEST(KvBlockPoolTest, CachedBlocksAreReusedThenEvictedOldestFirst) {
  KvBlockPool pool(3, true);
  std::vector<BlockId> first = *pool.allocate(2);
  pool.set_hash(first[0], hash_of(1));
  pool.set_hash(first[1], hash_of(2));
  pool.release(first);  // tail first: block of hash 2 is the older cached block
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_available(), 3);

  // A hit takes the block back with its reference.
  std::optional<BlockId> hit = pool.take_cached(hash_of(1));
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, first[0]);
  EXPECT_EQ(pool.reference_count(*hit), 1);
  EXPECT_EQ(pool.num_cached(), 1);
  // A second holder shares it.
  EXPECT_EQ(pool.take_cached(hash_of(1)), hit);
  EXPECT_EQ(pool.reference_count(*hit), 2);

  // Allocation uses the free block, then evicts the cached one.
  std::vector<BlockId> more = *pool.allocate(2);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.take_cached(hash_of(2))) << "evicted blocks lose their name";
  pool.release(more);
  pool.release(std::vector<BlockId>{*hit, *hit});
  EXPECT_EQ(pool.num_available(), 3);
  EXPECT_TRUE(pool.take_cached(hash_of(1)));
}

TEST(KvBlockPoolTest, DisabledPrefixCacheNamesNothing) {
  KvBlockPool pool(2, false);
  std::vector<BlockId> blocks = *pool.allocate(1);
  pool.set_hash(blocks[0], hash_of(1));
  pool.release(blocks);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.take_cached(hash_of(1)));
}

TEST(BlockHashTest, ChainsParentTokensAndSalt) {
  const int32_t a[] = {1, 2, 3};
  const int32_t b[] = {1, 2, 4};
  const BlockHash root = BlockHash::root("");
  EXPECT_EQ(BlockHash::chain(root, a), BlockHash::chain(root, a));
  EXPECT_NE(BlockHash::chain(root, a), BlockHash::chain(root, b));
  EXPECT_NE(BlockHash::chain(root, a), BlockHash::chain(BlockHash::root("tenant"), a));
  EXPECT_NE(BlockHash::chain(BlockHash::chain(root, a), a), BlockHash::chain(root, a));
}

}  // namespace
}  // namespace tachyon
