// One sequence's proposer for prompt lookup: its own NgramIndex and optionally a shared
// SuffixCache (the longer match wins; the sequence's own text on a tie). Used by the serving
// engine (one per request) and by the single-sequence Generator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/ngram_index.h"
#include "speculative/speculative_options.h"
#include "speculative/suffix_cache.h"

namespace tachyon {

class LookupProposer {
 public:
  // `shared` (may be null) must outlive the proposer; `partition` names whose text in it may
  // be proposed.
  LookupProposer(int max_draft_tokens, const SuffixCache* shared, uint64_t partition);

  // Replaces `out` with up to min(room, max_draft_tokens) guesses for what follows `tokens`
  // (the sequence so far: it only grows between calls); returns how many.
  int propose(std::span<const TokenId> tokens, int room, std::vector<TokenId>& out);
  DraftSource source() const { return source_; }

 private:
  int max_draft_tokens_;
  NgramIndex own_;
  const SuffixCache* shared_;
  uint64_t partition_;
  DraftSource source_ = DraftSource::kNgram;
  std::vector<TokenId> scratch_;
};

}  // namespace tachyon
