// Bookkeeping for the paged KV cache: which blocks are free, who holds them, and which free
// blocks still hold a reusable prefix. Blocks are metadata only (id, reference count, hash);
// PagedKvCache holds the tensors. Not thread-safe: the engine thread owns it.
//
// A block is in exactly one of three states:
//   held       reference count > 0 (one or more running requests use it)
//   cached     count 0 but it has a hash: its KV is still valid and a later request with the
//              same prefix may take it back; evicted least-recently-freed first when memory
//              is needed
//   free       count 0, no hash
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv_cache/block_hash.h"

namespace tachyon {

using BlockId = int32_t;
// A block table's entry for positions whose block was freed (sliding windows).
inline constexpr BlockId kNoBlock = -1;

class KvBlockPool {
 public:
  KvBlockPool(int num_blocks, bool enable_prefix_cache);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks an allocation can get now (free + cached).
  int num_available() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int num_held() const { return num_blocks() - num_available(); }
  int num_cached() const { return static_cast<int>(evictable_.size()); }

  // `count` blocks, each with reference count 1, taken from the free list first and then by
  // evicting cached blocks, oldest first. nullopt (and nothing taken) if there are too few.
  std::optional<std::vector<BlockId>> allocate(int count);

  // Drops one reference to each block (kNoBlock entries are skipped). Blocks that reach zero become cached (with a hash) or
  // free. Blocks are released in reverse order, so a sequence's tail is evicted before its head.
  void release(std::span<const BlockId> blocks);

  // The cached or held block named `hash`, with one more reference; nullopt if none.
  std::optional<BlockId> take_cached(const BlockHash& hash);
  // Whether a block is named `hash` (nothing taken).
  bool contains(const BlockHash& hash) const { return by_hash_.contains(hash); }

  // Names a full, computed block so that later requests can reuse it. A block already named
  // or a hash already owned by another block is left as it is.
  void set_hash(BlockId block, const BlockHash& hash);

  int reference_count(BlockId block) const { return blocks_[block].references; }

  // Takes a held block's name back (its contents are about to change): no later request will
  // find it in the prefix cache.
  void forget_hash(BlockId block);

 private:
  struct Block {
    int references = 0;
    std::optional<BlockHash> hash;
    std::list<BlockId>::iterator evictable_position;  // valid while cached
  };

  bool enable_prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;      // stack of free blocks
  std::list<BlockId> evictable_;   // cached blocks, least recently released first
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> by_hash_;
};

}  // namespace tachyon
