// Prompt lookup over one growing token sequence (its prompt and what it generated so far):
// the longest recent suffix (n tokens, n from max_ngram down to min_ngram) is looked up among
// the sequence's earlier n-grams, and the tokens that followed its latest earlier occurrence
// are the proposal. Input-grounded work (summaries, extraction, code edits) copies runs of the
// prompt, so these guesses are often right and cost nothing to make.
//
// An index, not a scan: every position is indexed once as the sequence grows (one hash-map
// entry per n), and a proposal is max_ngram lookups, whatever the length.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tachyon {

using TokenId = int32_t;

// A proposal: the guessed tokens and how long the suffix that matched was (0: no match).
struct NgramMatch {
  int ngram = 0;
  int num_tokens = 0;
};

// The hash of tokens[0, n) with n mixed in (an n-gram and a longer one never collide by
// construction of the key; equal keys are still verified against the tokens).
uint64_t ngram_key(std::span<const TokenId> tokens, uint64_t seed = 0);

class NgramIndex {
 public:
  explicit NgramIndex(int min_ngram = 1, int max_ngram = 4);

  // Indexes the n-grams of `tokens` not seen yet. `tokens` only grows between calls (the
  // same sequence, more tokens); a sequence that was cut back needs reset().
  void extend(std::span<const TokenId> tokens);
  void reset();

  // Appends to `out` up to `max_tokens` tokens that followed the latest earlier occurrence of
  // the longest suffix of `tokens` that occurred before. extend(tokens) must have run.
  NgramMatch propose(std::span<const TokenId> tokens, int max_tokens,
                     std::vector<TokenId>& out) const;

  size_t num_entries() const { return next_.size(); }

 private:
  int min_ngram_;
  int max_ngram_;
  // n-gram key → the position right after its latest occurrence whose successor is known.
  std::unordered_map<uint64_t, int32_t> next_;
  int32_t num_indexed_ = 0;  // tokens[0, num_indexed_) have had their n-grams recorded
};

}  // namespace tachyon
