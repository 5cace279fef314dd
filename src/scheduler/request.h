// A request as the scheduler sees it: its tokens, how many of them have keys and values in the
// cache, and the blocks that hold them. There are no prefill or decode phases: every step a
// running request gets some of its not-yet-computed tokens (a prompt chunk, or the one token
// sampled last step), and once all are computed the runner samples the next one.
#pragma once

#include <cstdint>
#include <vector>

#include "kv_cache/block_hash.h"
#include "kv_cache/kv_block_pool.h"

namespace tachyon {

using RequestId = uint64_t;

// Lower value = served first. First come, first served within a priority.
enum class Priority : int { kHigh = 0, kNormal = 1, kLow = 2 };

enum class RequestState { kWaiting, kRunning };

struct Request {
  RequestId id = 0;
  Priority priority = Priority::kNormal;
  uint64_t arrival = 0;  // order of submission; kept across preemptions
  // Who sent it (an API key) and its share: within a priority, tenants are served by weighted
  // fair queuing on the tokens computed for them.
  uint64_t tenant = 0;
  double tenant_weight = 1.0;

  std::vector<int32_t> tokens;  // the prompt, then every sampled token
  // Guesses for the tokens after tokens.back() (speculative decoding): a step that decodes
  // the request may compute them too, and the engine keeps those its samples confirm.
  std::vector<int32_t> draft_tokens;
  int num_prompt_tokens = 0;
  int num_computed_tokens = 0;  // tokens[0, num_computed_tokens) have KV in `blocks`
  // Prompt tokens found in the prefix cache when first admitted (reported as cached_tokens).
  int num_cached_prompt_tokens = 0;
  bool admitted_before = false;

  // The "sink" context policy (StreamingLLM), when sink_tokens > 0 (a multiple of the block
  // size): the request never outgrows max_positions. A prompt longer than the window is cut to
  // its first sink_tokens and its last tokens before it is computed; when generation fills the
  // window, computed tokens after the first sink_tokens are dropped (from `tokens` and
  // `blocks`), whole blocks at a time, and the keys of the rest are turned back by as many
  // positions (SchedulerOutput::key_shifts). `tokens` is then what the cache holds, not the
  // whole history.
  int sink_tokens = 0;
  int max_positions = 0;
  int num_dropped_tokens = 0;  // prompt tokens cut and tokens dropped so far
  // Blocks from this one on hold moved keys (the sink policy's turned-back keys, or SnapKV's
  // compacted heads: not what a cold run computes): they are not named for the prefix cache
  // until the request is recomputed. -1: none.
  int first_moved_block = -1;
  // SnapKV: the cache holds num_computed_tokens - slot_offset positions; token i >= the
  // compacted prompt sits in slot i - slot_offset (its RoPE position stays i).
  int slot_offset = 0;
  bool compacted = false;  // SnapKV ran on this admission's prompt
  int num_reused_tokens = 0;  // taken from the prefix cache at this admission

  std::vector<BlockId> blocks;           // block i holds positions [i·block_size, (i+1)·block_size)
  // Sliding-window models (SchedulerConfig::window): the same positions' blocks of the local
  // layers, from the local pool; those wholly before the window of every token still to be
  // computed are freed (kNoBlock).
  std::vector<BlockId> local_blocks;
  BlockHash hash_root;                   // from the cache salt
  std::vector<BlockHash> block_hashes;   // hashes of the full blocks computed so far
  RequestState state = RequestState::kWaiting;
  int num_preemptions = 0;
  uint64_t last_scheduled_step = 0;  // the scheduler's step counter when last given tokens

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  // Cache slots the computed tokens take (fewer than the tokens after SnapKV).
  int num_computed_slots() const { return num_computed_tokens - slot_offset; }
};

}  // namespace tachyon
