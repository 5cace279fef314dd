// Where the scheduler looks for a prompt's prefix blocks that the RAM prefix cache no longer
// holds (the KV disk tier): it allocates a block and asks the source to fill it. Models whose
// sliding-window layers have a pool of their own (PagedKvCache::has_local_layers) keep both
// parts of a block there; the scheduler asks for either or both.
#pragma once

#include <cstdint>
#include <span>

#include "kv_cache/block_hash.h"
#include "kv_cache/kv_block_pool.h"

namespace tachyon {

class PrefixBlockSource {
 public:
  virtual ~PrefixBlockSource() = default;
  // Whether the block named `hash` may be there (a cheap look-up, no reading).
  virtual bool has(const BlockHash& hash) const = 0;
  // Writes the KV of the block named `hash`, holding `tokens`: the (global) layers' into
  // `block` and the local layers' into `local_block` of the local pool; either may be kNoBlock
  // (not wanted). False when it could not (the blocks' contents are then unspecified).
  virtual bool fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block,
                    BlockId local_block) = 0;
};

// A block that became full and got its name in a step (Scheduler::on_step_done).
struct NamedBlock {
  BlockId block;
  BlockHash hash;
  std::span<const int32_t> tokens;  // valid until the request changes
  BlockId local_block = kNoBlock;   // its local layers' block (models with a local pool)
};

}  // namespace tachyon
