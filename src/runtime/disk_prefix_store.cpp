#include "runtime/disk_prefix_store.h"

#include <cstring>
#include <vector>

namespace tachyon {

DiskPrefixStore::DiskPrefixStore(std::unique_ptr<KvDiskTier> tier, PagedKvCache& cache)
    : tier_(std::move(tier)), cache_(cache) {}

bool DiskPrefixStore::fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block) {
  const std::vector<std::span<uint8_t>> layers = cache_.block_layers(block);
  return tier_->load(hash, tokens, layers);
}

void DiskPrefixStore::save(std::span<const NamedBlock> blocks) {
  for (const NamedBlock& named : blocks) {
    if (!tier_->wants(named.hash)) continue;
    std::vector<uint8_t> payload;
    for (std::span<uint8_t> layer : cache_.block_layers(named.block)) {
      payload.insert(payload.end(), layer.begin(), layer.end());
    }
    tier_->store(named.hash, named.tokens, std::move(payload));
  }
}

}  // namespace tachyon
