// A TokenConstraint over an XGrammar compiled grammar: one per constrained request, driven by
// the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <xgrammar/matcher.h>

#include "sampling/token_constraint.h"

namespace tachyon {

class GrammarConstraint final : public TokenConstraint {
 public:
  // `special`: one flag per id of the logits row, set for ids that are never text (control
  // tokens, padding) and so never allowed unless they end generation; shared by every request
  // of the model.
  GrammarConstraint(const xgrammar::CompiledGrammar& grammar,
                    std::shared_ptr<const std::vector<uint8_t>> special,
                    std::span<const TokenId> end_of_generation);

  bool accept(TokenId token) override;
  void mask(std::span<float> logits) override;
  void rollback(int num_tokens) override;
  bool is_terminated() const override;

 private:
  xgrammar::GrammarMatcher matcher_;
  std::shared_ptr<const std::vector<uint8_t>> special_;
  std::vector<TokenId> end_of_generation_;
  std::vector<int32_t> bitmask_;  // i32 [ceil(logits / 32)]: bit set = allowed next
};

}  // namespace tachyon
