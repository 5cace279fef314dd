#include "speculative/draft_length.h"

#include <algorithm>

namespace tachyon {

DraftLength::DraftLength(int max_tokens)
    : max_tokens_(std::max(0, max_tokens)), length_(max_tokens_) {}

int DraftLength::next() {
  if (skip_steps_ > 0) {
    --skip_steps_;
    return 0;
  }
  return length_;
}

void DraftLength::observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  if (accepted == 0) {
    consecutive_misses_ = std::min(consecutive_misses_ + 1, 4);
    skip_steps_ = (1 << consecutive_misses_) - 1;
    length_ = std::max(1, length_ / 2);
    return;
  }
  consecutive_misses_ = 0;
  length_ = accepted == proposed ? std::min(max_tokens_, length_ + std::max(1, length_ / 2))
                                 : std::clamp(accepted + 1, 1, max_tokens_);
}

}  // namespace tachyon
