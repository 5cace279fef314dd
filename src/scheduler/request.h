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

  std::vector<BlockId> blocks;           // block i holds positions [i·block_size, (i+1)·block_size)
  BlockHash hash_root;                   // from the cache salt
  std::vector<BlockHash> block_hashes;   // hashes of the full blocks computed so far
  RequestState state = RequestState::kWaiting;
  int num_preemptions = 0;
  uint64_t last_scheduled_step = 0;  // the scheduler's step counter when last given tokens

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
};

}  // namespace tachyon
