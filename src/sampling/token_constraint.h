// What the sampler asks of a constraint on the output (a grammar, a JSON schema, a regular
// expression): is this token allowed next, and which tokens are. The sampling layer knows only
// this interface; src/structured implements it.
#pragma once

#include <span>

#include "sampling/sampling_params.h"

namespace tachyon {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Advances past `token` when the constraint allows it next; false, and nothing changes,
  // when it does not.
  virtual bool accept(TokenId token) = 0;
  // Sets the logit of every token not allowed next to -infinity. `logits`: f32 [vocab], the
  // model's logits row (ids beyond the tokenizer's vocabulary are never allowed).
  virtual void mask(std::span<float> logits) = 0;
  // Undoes the last `num_tokens` accepted tokens.
  virtual void rollback(int num_tokens) = 0;
  // True once the constraint has accepted an end-of-generation token: nothing may follow.
  virtual bool is_terminated() const = 0;
  // A hint that the next mask will be asked for soon: it may be built in the background
  // (overlapped with the forward pass). No effect by default.
  virtual void prepare_mask() {}
};

}  // namespace tachyon
