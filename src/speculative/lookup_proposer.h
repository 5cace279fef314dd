// One sequence's proposer for prompt lookup: its own NgramIndex, optionally a shared
// SuffixCache (the longer match wins; the sequence's own text on a tie), and an estimate of
// how likely its next guess is to be right (a moving average of the per-token acceptance of
// its recent drafts), from which choose_draft_lengths (step_cost_model.h) decides how many
// guesses are worth verifying. Used by the serving engine (one per request) and by the
// single-sequence Generator.
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
  // How the last verified draft fared: `accepted` of its first `proposed` tokens were right.
  void observe(int proposed, int accepted);
  // The estimated probability that a guess is right, given the ones before it were.
  double acceptance() const { return acceptance_; }
  DraftSource source() const { return source_; }

 private:
  int max_draft_tokens_;
  double acceptance_ = 0.6;  // a neutral start: the first drafts are worth trying
  NgramIndex own_;
  const SuffixCache* shared_;
  uint64_t partition_;
  DraftSource source_ = DraftSource::kNgram;
  std::vector<TokenId> scratch_;
};

}  // namespace tachyon
