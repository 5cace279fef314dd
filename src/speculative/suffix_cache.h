// Prompt lookup across requests: a bounded, shared index of recent requests' prompts and
// outputs. Agent and tool loops send nearly the same text again and again (the same tool
// schema, the same file, the previous answer quoted back), so the continuation of a suffix is
// often in an earlier request even when it is not in this one.
//
// Tenants never see each other's text: every sequence is filed under a partition (the engine
// uses the API key and the cache salt) and a lookup only matches sequences of its own
// partition (the partition is part of every key, and checked again on a hit).
// Memory is bounded by `max_tokens` stored tokens (plus max_ngram index entries per token);
// the oldest sequences are evicted first. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "speculative/ngram_index.h"

namespace tachyon {

class SuffixCache {
 public:
  SuffixCache(int64_t max_tokens, int min_ngram = 2, int max_ngram = 4);

  // Files a finished sequence (prompt + output). Sequences longer than max_tokens keep their
  // last max_tokens tokens.
  void add(uint64_t partition, std::span<const TokenId> tokens);

  // Appends to `out` up to `max_tokens` tokens that followed the longest suffix of `context`
  // in the partition's most recent sequence holding it.
  NgramMatch propose(uint64_t partition, std::span<const TokenId> context, int max_tokens,
                     std::vector<TokenId>& out) const;

  int64_t num_tokens() const { return num_tokens_; }
  size_t num_sequences() const { return sequences_.size(); }
  size_t num_entries() const { return index_.size(); }

 private:
  struct Sequence {
    uint64_t partition;
    std::vector<TokenId> tokens;
  };
  struct Location {
    uint64_t sequence;  // its number (sequences_[number - first_sequence_])
    int32_t next;       // the position after the n-gram
  };
  void evict_oldest();
  // Calls visit(key, next) for every indexed n-gram of `sequence`.
  template <typename Visit>
  void for_each_ngram(const Sequence& sequence, Visit&& visit) const;

  int64_t max_tokens_;
  int min_ngram_;
  int max_ngram_;
  std::deque<Sequence> sequences_;  // oldest first
  uint64_t first_sequence_ = 0;     // number of sequences_.front()
  int64_t num_tokens_ = 0;
  std::unordered_map<uint64_t, Location> index_;
};

}  // namespace tachyon
