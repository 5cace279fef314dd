// Where the scheduler looks for a prompt's prefix blocks that the RAM prefix cache no longer
// holds (the KV disk tier): it allocates a block and asks the source to fill it.
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
  // Writes the KV of the block named `hash`, holding `tokens`, into `block`; false when it
  // could not (the block's contents are then unspecified).
  virtual bool fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block) = 0;
};

// A block that became full and got its name in a step (Scheduler::on_step_done).
struct NamedBlock {
  BlockId block;
  BlockHash hash;
  std::span<const int32_t> tokens;  // valid until the request changes
};

}  // namespace tachyon
