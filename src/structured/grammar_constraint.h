// A TokenConstraint over an XGrammar compiled grammar: one per constrained request, driven by
// the engine thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <memory>
#include <span>
#include <vector>

#include <xgrammar/matcher.h>

#include "structured/mask_worker.h"
#include "sampling/token_constraint.h"

namespace tachyon {

class GrammarConstraint final : public TokenConstraint {
 public:
  // `special`: one flag per id of the logits row, set for ids that are never text (control
  // tokens, padding) and so never allowed unless they end generation; shared by every request
  // of the model.
  // `worker` (may be null): builds masks ahead of need after prepare_mask().
  GrammarConstraint(const xgrammar::CompiledGrammar& grammar,
                    std::shared_ptr<const std::vector<uint8_t>> special,
                    std::span<const TokenId> end_of_generation,
                    std::shared_ptr<MaskWorker> worker = nullptr);
  ~GrammarConstraint() override;

  bool accept(TokenId token) override;
  void mask(std::span<float> logits) override;
  void rollback(int num_tokens) override;
  bool is_terminated() const override;
  void prepare_mask() override;

 private:
  // Fills bitmask_ from the matcher's current state.
  void fill_bitmask();
  // Waits for a mask being built in the background; the matcher is ours again after it.
  void wait_for_worker() const;

  xgrammar::GrammarMatcher matcher_;
  std::shared_ptr<const std::vector<uint8_t>> special_;
  std::vector<TokenId> end_of_generation_;
  std::vector<int32_t> bitmask_;  // i32 [ceil(logits / 32)]: bit set = allowed next

  std::shared_ptr<MaskWorker> worker_;
  // A background build: posted, and whether it is done; bitmask_ then holds the mask of the
  // current state (until the matcher moves).
  mutable std::mutex mutex_;
  mutable std::condition_variable done_signal_;
  bool building_ = false;
  bool bitmask_current_ = false;
};

}  // namespace tachyon
