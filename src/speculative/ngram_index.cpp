#include "speculative/ngram_index.h"

#include <algorithm>

namespace tachyon {

uint64_t ngram_key(std::span<const TokenId> tokens, uint64_t seed) {
  // FNV-1a over the ids, then a final avalanche (splitmix64's) so that nearby n-grams spread.
  uint64_t hash = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull) ^ tokens.size();
  for (TokenId token : tokens) {
    hash ^= static_cast<uint32_t>(token);
    hash *= 0x100000001b3ull;
  }
  hash ^= hash >> 30;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 27;
  hash *= 0x94d049bb133111ebull;
  return hash ^ (hash >> 31);
}

NgramIndex::NgramIndex(int min_ngram, int max_ngram)
    : min_ngram_(std::max(1, min_ngram)), max_ngram_(std::max(min_ngram_, max_ngram)) {}

void NgramIndex::reset() {
  next_.clear();
  num_indexed_ = 0;
}

void NgramIndex::extend(std::span<const TokenId> tokens) {
  // Position p's arrival makes the n-grams ending at p - 1 useful: p is what followed them.
  // The latest occurrence wins, so a repeated phrase continues as it did most recently.
  for (int32_t p = std::max(num_indexed_, int32_t{1}); p < static_cast<int32_t>(tokens.size()); ++p) {
    for (int n = min_ngram_; n <= max_ngram_ && n <= p; ++n) {
      next_[ngram_key(tokens.subspan(p - n, n))] = p;
    }
  }
  num_indexed_ = std::max<int32_t>(num_indexed_, static_cast<int32_t>(tokens.size()));
}

NgramMatch NgramIndex::propose(std::span<const TokenId> tokens, int max_tokens,
                               std::vector<TokenId>& out) const {
  const int length = static_cast<int>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(max_ngram_, length - 1); n >= min_ngram_; --n) {
    const std::span<const TokenId> suffix = tokens.subspan(length - n, n);
    auto found = next_.find(ngram_key(suffix));
    if (found == next_.end()) continue;
    const int next = found->second;
    // The suffix itself is never indexed (nothing follows it yet), so `next` < length; a hash
    // collision is told apart by comparing the tokens.
    if (next < n || next >= length ||
        !std::equal(suffix.begin(), suffix.end(), tokens.begin() + (next - n))) {
      continue;
    }
    const int count = std::min(max_tokens, length - next);
    out.insert(out.end(), tokens.begin() + next, tokens.begin() + next + count);
    return {n, count};
  }
  return {};
}

}  // namespace tachyon
