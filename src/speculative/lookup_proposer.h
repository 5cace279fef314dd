// One sequence's proposer for prompt lookup: its own NgramIndex, optionally a shared
// SuffixCache (the longer match wins; the sequence's own text on a tie), and an adaptive
// DraftLength. Used by the serving engine (one per request) and by the single-sequence
// Generator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/draft_length.h"
#include "speculative/ngram_index.h"
#include "speculative/speculative_options.h"
#include "speculative/suffix_cache.h"

namespace tachyon {

class LookupProposer {
 public:
  // `shared` (may be null) must outlive the proposer; `partition` names whose text in it may
  // be proposed.
  LookupProposer(int max_draft_tokens, const SuffixCache* shared, uint64_t partition);

  // Replaces `out` with up to min(room, the adaptive length) guesses for what follows
  // `tokens` (the sequence so far: it only grows between calls); returns how many.
  int propose(std::span<const TokenId> tokens, int room, std::vector<TokenId>& out);
  // How the last proposal fared (drafts verified, of which accepted).
  void observe(int proposed, int accepted) { length_.observe(proposed, accepted); }
  DraftSource source() const { return source_; }

 private:
  NgramIndex own_;
  DraftLength length_;
  const SuffixCache* shared_;
  uint64_t partition_;
  DraftSource source_ = DraftSource::kNgram;
  std::vector<TokenId> scratch_;
};

}  // namespace tachyon
