// What one engine step runs: data only, owned by the engine loop for the step's duration.
#pragma once

#include <vector>

#include "kv_cache/block_move.h"
#include "scheduler/request.h"

namespace tachyon {

struct ScheduledRequest {
  Request* request;     // owned by the Scheduler; valid until the step ends
  int num_new_tokens;   // tokens[num_computed_tokens, + num_new_tokens) run this step
  // True when the step computes the request's last known token: its logits give the next one.
  bool samples_next_token;
  // Of num_new_tokens, how many are draft tokens (the last ones, from request->draft_tokens):
  // each gets logits too, and the engine samples position by position while the drafts match.
  int num_draft_tokens = 0;
  // Set by the engine before on_step_done(): drafts its samples did not confirm. Their keys
  // and values are dropped (num_computed_tokens and the block table roll back).
  int num_rejected_tokens = 0;
};

struct SchedulerOutput {
  std::vector<BlockCopy> block_copies;
  std::vector<KeyShift> key_shifts;
  std::vector<ScheduledRequest> scheduled;
  std::vector<RequestId> preempted;  // lost their blocks this step; will be recomputed
  int num_tokens = 0;                // total new tokens

  bool empty() const { return scheduled.empty(); }
};

}  // namespace tachyon
