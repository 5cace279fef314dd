// Cache work decided by the scheduler and made before a step's forward pass (the "sink"
// policy's moves), in this order: copy each block `from` into `to` (a private copy of a shared
// block), then turn the keys of the first `count` slots of each shifted block back by `delta`
// positions (DecoderModel::shift_keys). `local`: the blocks are the sliding-window layers' pool's
// (PagedKvCache::copy_block), not the other layers'.
#pragma once

#include "kv_cache/kv_block_pool.h"

namespace tachyon {

struct BlockCopy {
  BlockId from;
  BlockId to;
  bool local = false;
};

struct KeyShift {
  BlockId block;
  int count;
  int delta;
  bool local = false;
};

}  // namespace tachyon
