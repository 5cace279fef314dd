#include "kv_cache/kv_block_pool.h"

#include "core/check.h"

namespace tachyon {

KvBlockPool::KvBlockPool(int num_blocks, bool enable_prefix_cache)
    : enable_prefix_cache_(enable_prefix_cache), blocks_(num_blocks) {
  free_.reserve(num_blocks);
  // Lowest ids on top of the stack, handed out first.
  for (BlockId id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

std::optional<std::vector<BlockId>> KvBlockPool::allocate(int count) {
  if (count < 0 || count > num_available()) return std::nullopt;
  std::vector<BlockId> taken;
  taken.reserve(count);
  while (static_cast<int>(taken.size()) < count) {
    BlockId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = evictable_.front();
      evictable_.pop_front();
      forget_hash(id);
    }
    TACHYON_CHECK(blocks_[id].references == 0);
    blocks_[id].references = 1;
    taken.push_back(id);
  }
  return taken;
}

void KvBlockPool::release(std::span<const BlockId> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it == kNoBlock) continue;  // a window's freed entry
    Block& block = blocks_[*it];
    TACHYON_CHECK(block.references > 0);
    if (--block.references > 0) continue;
    if (block.hash) {
      evictable_.push_back(*it);
      block.evictable_position = std::prev(evictable_.end());
    } else {
      free_.push_back(*it);
    }
  }
}

std::optional<BlockId> KvBlockPool::take_cached(const BlockHash& hash) {
  auto found = by_hash_.find(hash);
  if (found == by_hash_.end()) return std::nullopt;
  Block& block = blocks_[found->second];
  if (block.references == 0) evictable_.erase(block.evictable_position);
  ++block.references;
  return found->second;
}

void KvBlockPool::set_hash(BlockId id, const BlockHash& hash) {
  if (!enable_prefix_cache_) return;
  Block& block = blocks_[id];
  TACHYON_CHECK(block.references > 0);
  if (block.hash) return;
  if (!by_hash_.emplace(hash, id).second) return;  // another block already holds this prefix
  block.hash = hash;
}

void KvBlockPool::forget_hash(BlockId id) {
  Block& block = blocks_[id];
  if (!block.hash) return;
  by_hash_.erase(*block.hash);
  block.hash.reset();
}

}  // namespace tachyon
