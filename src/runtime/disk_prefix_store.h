// Joins the paged KV cache to its disk tier (kv_cache/kv_disk_tier.h): the scheduler reads
// prefix blocks missing from RAM back through it, and the engine hands it every block that
// becomes full, which it copies and queues for writing. Blocks are written as soon as they
// are full, not when RAM evicts them, so that a restart (or a crash) loses none. With a local
// pool (Gemma 3's sliding-window layers) a file holds both parts of a block: the global layers'
// bytes, then the local layers'.
#pragma once

#include <memory>
#include <span>

#include "kv_cache/kv_disk_tier.h"
#include "kv_cache/paged_kv_cache.h"
#include "scheduler/prefix_block_source.h"

namespace tachyon {

class DiskPrefixStore : public PrefixBlockSource {
 public:
  // `cache` must outlive the store.
  DiskPrefixStore(std::unique_ptr<KvDiskTier> tier, PagedKvCache& cache);

  bool has(const BlockHash& hash) const override { return tier_->contains(hash); }
  bool fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block,
            BlockId local_block) override;

  // Copies each block not yet on disk and queues it for writing.
  void save(std::span<const NamedBlock> blocks);

  KvDiskTier& tier() { return *tier_; }
  const KvDiskTier& tier() const { return *tier_; }

 private:
  std::unique_ptr<KvDiskTier> tier_;
  PagedKvCache& cache_;
};

}  // namespace tachyon
