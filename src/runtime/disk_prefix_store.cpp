#include "runtime/disk_prefix_store.h"

#include <cstring>
#include <vector>

#include "core/check.h"

namespace tachyon {

DiskPrefixStore::DiskPrefixStore(std::unique_ptr<KvDiskTier> tier, PagedKvCache& cache)
    : tier_(std::move(tier)), cache_(cache) {}

bool DiskPrefixStore::fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block,
                           BlockId local_block) {
  // The file holds the global layers' part, then the local layers' (save()); a part nobody
  // wants is read into scratch memory, for the checksum covers the whole file.
  std::vector<std::span<uint8_t>> parts;
  std::vector<uint8_t> scratch;
  auto add_part = [&](BlockId id, bool local) {
    if (id != kNoBlock) {
      for (std::span<uint8_t> layer : cache_.block_layers(id, local)) parts.push_back(layer);
      return;
    }
    size_t bytes = 0;
    for (std::span<uint8_t> layer : cache_.block_layers(0, local)) bytes += layer.size();
    scratch.resize(bytes);
    parts.emplace_back(scratch);
  };
  TACHYON_CHECK(block != kNoBlock || local_block != kNoBlock);
  add_part(block, false);
  if (cache_.has_local_layers()) add_part(local_block, true);
  return tier_->load(hash, tokens, parts);
}

void DiskPrefixStore::save(std::span<const NamedBlock> blocks) {
  for (const NamedBlock& named : blocks) {
    if (cache_.has_local_layers() && named.local_block == kNoBlock) continue;  // half a block
    if (!tier_->wants(named.hash)) continue;
    std::vector<uint8_t> payload;
    auto append = [&](BlockId id, bool local) {
      for (std::span<uint8_t> layer : cache_.block_layers(id, local)) {
        payload.insert(payload.end(), layer.begin(), layer.end());
      }
    };
    append(named.block, false);
    if (cache_.has_local_layers()) append(named.local_block, true);
    tier_->store(named.hash, named.tokens, std::move(payload));
  }
}

}  // namespace tachyon
