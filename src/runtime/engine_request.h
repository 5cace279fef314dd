// What a client asks of the engine and what the engine sends back, as native values: the
// server turns JSON into an EngineRequest and EngineOutputs into JSON / SSE.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "sampling/stop_condition.h"
#include "sampling/token_constraint.h"
#include "scheduler/request.h"  // Priority, RequestId

namespace tachyon {

struct EngineRequest {
  std::vector<TokenId> prompt;  // at least one token; prompt + 1 must fit the context (or `sink`)
  // max_tokens unset ⇒ until the context is full. Stop strings and end-of-generation tokens
  // are handled by the engine.
  SamplingParams sampling;
  Priority priority = Priority::kNormal;
  // Who sent it (e.g. an API key's id) and its weight: tenants of the same priority share the
  // engine by weighted fair queuing.
  uint64_t tenant = 0;
  double tenant_weight = 1.0;
  // Prefix-cache blocks are shared only between requests with the same salt.
  std::string cache_salt;
  // The request fails with kDeadlineExceeded when still running at this time.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Decode special tokens (e.g. <|im_end|>) as text? OpenAI servers skip them.
  bool skip_special_tokens = true;
  // When the sequence outgrows the context: false, it may not (a longer prompt is an error,
  // generation ends with kLength at a full context); true, the "sink" policy (StreamingLLM):
  // the first block of tokens and a recent window stay in the KV cache, older tokens are
  // dropped and the rest's positions turned back, so it runs on in bounded memory
  // (Request::sink_tokens). A longer prompt is cut to its first block and its last tokens.
  bool sink = false;
  // Opt out of the engine's speculative decoding (it never changes the output; a client may
  // still prefer not to spend compute on guesses).
  bool speculate = true;
  // The output's grammar (response_format json_schema, regex...): every sampled token is one it
  // allows; drafts it rejects are simply not accepted. Owned by this request alone (it keeps
  // the parser's state); null ⇒ free text.
  std::shared_ptr<TokenConstraint> constraint;
};

// One event of a request's stream. A request produces zero or more events with new tokens,
// then exactly one with `finished` set (which may carry tokens too).
struct EngineOutput {
  std::vector<TokenId> tokens;           // newly generated ids
  std::string text;                      // text that became final with them (may be empty)
  std::vector<SampleLogprobs> logprobs;  // one per token when sampling.logprobs

  bool finished = false;
  // When finished: kStop (end-of-generation token or stop string) or kLength (max_tokens or
  // a full context); kNone when the request failed or was cancelled (see `status`).
  FinishReason finish_reason = FinishReason::kNone;
  // Not ok when the request failed (deadline, can never fit in KV memory, internal error) or
  // was cancelled (kCancelled).
  Status status;

  // Counts so far (complete in the finishing event).
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int completion_tokens = 0;
  // With `sink`: tokens cut from the prompt or dropped from the cache so far.
  int dropped_tokens = 0;
  // Seconds from submit until the engine first scheduled it (0 until then).
  double queue_seconds = 0;
  // Speculative decoding so far: draft tokens verified and, of those, accepted.
  int draft_tokens = 0;
  int accepted_draft_tokens = 0;
};

}  // namespace tachyon
