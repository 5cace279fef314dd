#include "constrain/grammar_constraint.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace tachyon {

GrammarConstraint::GrammarConstraint(const xgrammar::CompiledGrammar& grammar,
                                     std::shared_ptr<const std::vector<uint8_t>> special,
                                     std::span<const TokenId> end_of_generation)
    : matcher_(grammar),
      special_(std::move(special)),
      end_of_generation_(end_of_generation.begin(), end_of_generation.end()),
      bitmask_(static_cast<size_t>(xgrammar::GetBitmaskSize(static_cast<int>(special_->size())))) {}

bool GrammarConstraint::accept(TokenId token) {
  if (token < 0 || static_cast<size_t>(token) >= special_->size() || matcher_.IsTerminated()) {
    return false;
  }
  // XGrammar logs a warning for each rejected special token; ids that are never text are
  // decided here without asking it.
  const bool ends = std::find(end_of_generation_.begin(), end_of_generation_.end(), token) !=
                    end_of_generation_.end();
  if ((*special_)[static_cast<size_t>(token)] && !ends) return false;
  return matcher_.AcceptToken(token);
}

void GrammarConstraint::mask(std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (matcher_.IsTerminated()) {
    std::fill(logits.begin(), logits.end(), kNegInf);
    return;
  }
  DLTensor tensor{};
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  tensor.data = bitmask_.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  matcher_.FillNextTokenBitmask(&tensor);
  const size_t size = std::min(logits.size(), special_->size());
  for (size_t word = 0; word * 32 < size; ++word) {
    const uint32_t bits = static_cast<uint32_t>(bitmask_[word]);
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(size, word * 32 + 32);
    for (size_t id = word * 32; id < end; ++id) {
      if (!((bits >> (id - word * 32)) & 1u)) logits[id] = kNegInf;
    }
  }
  // Logits past the grammar's vocabulary (never expected: it spans the whole row).
  for (size_t id = size; id < logits.size(); ++id) logits[id] = kNegInf;
}

void GrammarConstraint::rollback(int num_tokens) {
  if (num_tokens > 0) matcher_.Rollback(num_tokens);
}

bool GrammarConstraint::is_terminated() const { return matcher_.IsTerminated(); }

}  // namespace tachyon
