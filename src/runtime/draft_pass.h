// One pass of a model that guesses tokens for speculative decoding (a draft model, the MTP
// layer): timed when it is a pass of single tokens (what decode-time guessing costs), then each
// logits row's greedy token.
#pragma once

#include <vector>

#include "core/function_ref.h"
#include "core/status.h"
#include "models/forward_batch.h"
#include "speculative/step_cost_model.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {

// Runs `forward` (which fills `logits`, f32 [batch.logits_tokens.size(), vocab]) and puts the
// argmax of each row in `next`.
Status run_draft_pass(const ForwardBatch& batch, FunctionRef<Status()> forward,
                      const std::vector<float>& logits, int64_t vocab, StepCostModel& cost,
                      std::vector<TokenId>& next);

}  // namespace tachyon
