#include "runtime/draft_pass.h"

#include <chrono>

#include "kernels/cpu/elementwise.h"

namespace tachyon {

Status run_draft_pass(const ForwardBatch& batch, FunctionRef<Status()> forward,
                      const std::vector<float>& logits, int64_t vocab, StepCostModel& cost,
                      std::vector<TokenId>& next) {
  const auto start = std::chrono::steady_clock::now();
  TACHYON_RETURN_IF_ERROR(forward());
  if (static_cast<size_t>(batch.num_tokens()) == batch.sequences.size()) {
    cost.observe(batch.num_tokens(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  next.resize(batch.logits_tokens.size());
  for (size_t i = 0; i < next.size(); ++i) {
    next[i] = static_cast<TokenId>(kernels::argmax(logits.data() + i * vocab, vocab));
  }
  return Status();
}

}  // namespace tachyon
