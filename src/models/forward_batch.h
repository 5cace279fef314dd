// One engine step's work for the model, as flat arrays: the new tokens of every scheduled
// sequence back to back (a decode contributes one token, a prompt chunk many), where each
// token's keys and values go in the paged cache, and which tokens need logits. Built by the
// runtime's ModelRunner from the scheduler's decisions; read by DecoderModel::forward_batch.
#pragma once

#include <cstdint>
#include <vector>

#include "kv_cache/block_move.h"
#include "kv_cache/kv_block_pool.h"

namespace tachyon {

struct BatchSequence {
  int first_token = 0;     // index of its first new token in ForwardBatch::tokens
  int num_tokens = 0;      // new tokens this step
  int start_position = 0;  // position of the first new token (= tokens already in the cache)
  std::vector<BlockId> block_table;  // blocks holding positions 0 .. start_position+num_tokens-1
  // With sliding-window layers (PagedKvCache::has_local_layers): their blocks, from the local
  // pool, for the same positions; blocks before the window are kNoBlock (freed).
  std::vector<BlockId> local_block_table;
};

struct ForwardBatch {
  int block_size = 16;
  // Cache moves made before the pass (kv_cache/block_move.h): block copies, then key shifts.
  std::vector<BlockCopy> block_copies;
  std::vector<KeyShift> key_shifts;
  std::vector<int32_t> tokens;     // [num_tokens] ids
  std::vector<int> positions;      // [num_tokens]
  std::vector<int64_t> slots;      // [num_tokens] cache row = block * block_size + offset
  std::vector<int64_t> local_slots;  // [num_tokens] the same in local layers' blocks, if any
  std::vector<BatchSequence> sequences;
  std::vector<int> logits_tokens;  // indices into tokens whose logits are wanted, ascending

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  // Empties it for the next pass (block_size kept; the vectors keep their memory).
  void clear() {
    block_copies.clear();
    key_shifts.clear();
    tokens.clear();
    positions.clear();
    slots.clear();
    local_slots.clear();
    sequences.clear();
    logits_tokens.clear();
  }
};

}  // namespace tachyon
